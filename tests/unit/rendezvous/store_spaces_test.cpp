// The store's two key spaces behind one port (store_server.hpp): agents
// (AGENT) and everyone else (the workers), and the round boundary
// (CLEAR_WORKERS). Real sockets on 127.0.0.1, one server per case.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::rendezvous {
namespace {

using std::chrono::seconds;

std::unique_ptr<StoreServer> Serve(const std::string& token = "") {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  o.token = token;
  auto server = StoreServer::Start(o);
  REQUIRE(server.ok());
  return std::move(*server);
}

StoreClient Connect(const StoreServer& s, StoreRole role, const std::string& token = "") {
  auto c = StoreClient::Connect("127.0.0.1", s.port(), seconds(5), token, role);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  return std::move(*c);
}

TEST_CASE("store: workers neither see nor change the agents' keys, and the reverse") {
  auto server = Serve();
  StoreClient agent = Connect(*server, StoreRole::kAgent);
  StoreClient worker = Connect(*server, StoreRole::kWorker);
  REQUIRE(agent.Set("rdzv/job/job", "record").ok());
  REQUIRE(worker.Set("default_pg/0", "id").ok());

  CHECK(*worker.Check({"rdzv/job/job"}) == false);
  CHECK(*worker.ListKeys() == std::vector<std::string>{"default_pg/0"});
  CHECK(*worker.NumKeys() == 1);
  // A worker writing a rendezvous key's name writes its own key.
  REQUIRE(worker.Set("rdzv/job/job", "forged").ok());
  CHECK(*worker.Get("rdzv/job/job") == "forged");
  CHECK(*agent.Get("rdzv/job/job") == "record");
  CHECK(*agent.Check({"default_pg/0"}) == false);
  CHECK(*agent.NumKeys() == 1);
}

TEST_CASE("store: with a token, only a connection that proved it becomes an agent") {
  auto server = Serve("s3cret");
  StoreClient agent = Connect(*server, StoreRole::kAgent, "s3cret");
  REQUIRE(agent.Set("rdzv/job/job", "record").ok());
  // Its host is admitted: a plain client from it gets in, into the workers' space.
  StoreClient worker = Connect(*server, StoreRole::kWorker);
  CHECK(*worker.Check({"rdzv/job/job"}) == false);
  // Without the token, asking for the agents' space closes the connection.
  auto intruder =
      StoreClient::Connect("127.0.0.1", server->port(), seconds(5), "", StoreRole::kAgent);
  CHECK_FALSE(intruder.ok());
  // A worker that proves the token (the DDP core with DDPRUN_STORE_TOKEN) is still a worker.
  StoreClient proved = Connect(*server, StoreRole::kWorker, "s3cret");
  CHECK(*proved.Check({"rdzv/job/job"}) == false);
  CHECK(*agent.Get("rdzv/job/job") == "record");
}

TEST_CASE("store: a new round empties the workers' space and nothing else") {
  auto server = Serve();
  StoreClient agent = Connect(*server, StoreRole::kAgent);
  StoreClient old_worker = Connect(*server, StoreRole::kWorker);
  REQUIRE(agent.Set("rdzv/job/r0/cleared", "1").ok());
  REQUIRE(*old_worker.Add("init/", 1) == 1);
  REQUIRE(old_worker.Set("default_pg/0//nccl_id", "round 0").ok());

  REQUIRE(agent.ClearWorkers().ok());
  StoreClient new_worker = Connect(*server, StoreRole::kWorker);
  CHECK(*new_worker.NumKeys() == 0);
  CHECK(*new_worker.Check({"default_pg/0//nccl_id"}) == false);
  CHECK(*agent.Get("rdzv/job/r0/cleared") == "1");
}

TEST_CASE("store: a worker of an earlier round can neither read nor write the new round's keys") {
  auto server = Serve();
  StoreClient agent = Connect(*server, StoreRole::kAgent);
  StoreClient stale = Connect(*server, StoreRole::kWorker);
  REQUIRE(*stale.Add("init/", 1) == 1);  // it used the workers' space (the reply says when)
  // Blocked on a key the next round will set, as a slow rank of the last round would be.
  auto waited = std::async(std::launch::async, [&] { return stale.Wait({"key"}, seconds(10)); });

  REQUIRE(agent.ClearWorkers().ok());
  StoreClient fresh = Connect(*server, StoreRole::kWorker);
  REQUIRE(fresh.Set("key", "round 1").ok());
  REQUIRE(waited.wait_for(seconds(10)) == std::future_status::ready);
  Status w = waited.get();
  CHECK(w.code() == StatusCode::kUnavailable);  // closed: the store is gone for it
  CHECK_FALSE(stale.Set("key", "round 0").ok());
  CHECK(*fresh.Get("key") == "round 1");
}

TEST_CASE("store: a connection that has not used the workers' space survives a new round") {
  auto server = Serve();
  StoreClient agent = Connect(*server, StoreRole::kAgent);
  StoreClient idle = Connect(*server, StoreRole::kWorker);  // VALIDATE and PING only
  REQUIRE(agent.ClearWorkers().ok());
  REQUIRE(idle.Set("k", "v").ok());
  CHECK(*idle.Get("k") == "v");
  // The agents' connections are never closed by it.
  REQUIRE(agent.ClearWorkers().ok());
  CHECK(*agent.NumKeys() == 0);
}

TEST_CASE("store: a worker cannot start a new round") {
  auto server = Serve();
  StoreClient worker = Connect(*server, StoreRole::kWorker);
  REQUIRE(worker.Set("default_pg/0", "id").ok());
  CHECK_FALSE(worker.ClearWorkers().ok());
  StoreClient other = Connect(*server, StoreRole::kWorker);
  CHECK(*other.Get("default_pg/0") == "id");
}

TEST_CASE("store: a client turned away in the handshake tries again and gets in") {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  o.guard.max_connections_per_host = 1;  // the second connection from this host is refused
  auto server = StoreServer::Start(o);
  REQUIRE(server.ok());
  auto first = std::make_unique<StoreClient>(Connect(**server, StoreRole::kWorker));
  REQUIRE(first->Set("k", "v").ok());
  // The second is refused (closed) until the first goes 150 ms later.
  auto second = std::async(std::launch::async, [&] {
    return StoreClient::Connect("127.0.0.1", (*server)->port(), seconds(5));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  first.reset();
  auto client = second.get();
  REQUIRE_MESSAGE(client.ok(), client.status().message());
  CHECK(*client->Get("k") == "v");
}

TEST_CASE("store: a wrong token still fails, after the handshake retries") {
  auto server = Serve("s3cret");
  const auto start = std::chrono::steady_clock::now();
  auto c = StoreClient::Connect("127.0.0.1", server->port(), seconds(5), "wrong");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("refused the job token") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < seconds(4));
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

TEST_CASE("store: a wait that times out names the keys still missing first") {
  auto server = StoreServer::Start([] {
    StoreServerOptions o;
    o.host = "127.0.0.1";
    return o;
  }());
  REQUIRE(server.ok());
  auto c = StoreClient::Connect("127.0.0.1", (*server)->port(), std::chrono::seconds(5), "",
                                StoreRole::kWorker);
  REQUIRE(c.ok());
  REQUIRE(c->Set("g/0", "mine").ok());
  Status s = c->Wait({"g/0", "g/1"}, std::chrono::milliseconds(200));
  CHECK(s.code() == StatusCode::kDeadlineExceeded);
  CHECK(s.message().find("waited 200 ms for keys g/1 (of g/0, g/1; the others were set)") !=
        std::string::npos);
  Status none = c->Wait({"h/0", "h/1"}, std::chrono::milliseconds(100));
  CHECK(none.message().find("waited 100 ms for keys h/0, h/1") != std::string::npos);
  CHECK(c->Set("g/1", "late").ok());  // the connection is still in step after both
  CHECK(*c->Get("g/1") == "late");
}

}  // namespace
}  // namespace ddprun::rendezvous
