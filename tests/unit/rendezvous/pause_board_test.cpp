// Pauses across nodes (rendezvous/pause_board.hpp): the log of what holds
// each node's workers, on the store's state machine (PauseLog) and on a real
// store over loopback with its thread (PauseBoard).
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/held_worker.hpp"
#include "rendezvous/kv.hpp"
#include "rendezvous/pause_board.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::rendezvous {
namespace {

HeldWorker Stopped(int rank, int node, char state = 'T') {
  HeldWorker w = HeldWorker::Local(state, rank, 0, 4000 + rank);
  w.node_rank = node;
  w.host = "host-" + std::to_string(node);
  return w;
}

TEST_CASE("held worker: encoded and decoded alike, none as none, junk refused") {
  const HeldWorker w = Stopped(3, 1, 't');
  auto back = HeldWorker::Decode(w.Encode());
  REQUIRE(back.ok());
  CHECK(*back == w);
  auto none = HeldWorker::Decode(HeldWorker{}.Encode());
  REQUIRE(none.ok());
  CHECK_FALSE(none->held());
  CHECK_FALSE(HeldWorker::Decode("X 1 0 2 0 h").ok());
  CHECK_FALSE(HeldWorker::Decode("T 1 0").ok());
  CHECK_FALSE(HeldWorker::Decode("").ok());
}

TEST_CASE("pause log: each agent reads the others' stops and continues in order, not its own") {
  LocalStore store;
  const RendezvousKeys keys("job");
  auto a_kv = store.Connect();
  auto b_kv = store.Connect();
  auto c_kv = store.Connect();
  PauseLog a(keys, 2, "a"), b(keys, 2, "b"), c(keys, 2, "c");

  REQUIRE(a.Step(a_kv, Stopped(1, 0)).ok());
  REQUIRE(b.Step(b_kv, std::nullopt).ok());
  REQUIRE(b.Elsewhere().size() == 1);
  CHECK(b.Elsewhere()[0] == Stopped(1, 0));
  CHECK(a.Elsewhere().empty());  // its own stop is not elsewhere

  // c writes without having read: it takes the next free place, reading a's on its way.
  REQUIRE(c.Step(c_kv, Stopped(5, 2)).ok());
  CHECK(c.Elsewhere() == std::vector<HeldWorker>{Stopped(1, 0)});
  REQUIRE(a.Step(a_kv, HeldWorker{}).ok());  // a's worker runs again
  REQUIRE(b.Step(b_kv, std::nullopt).ok());
  CHECK(b.Elsewhere() == std::vector<HeldWorker>{Stopped(5, 2)});
  CHECK(a.Elsewhere() == std::vector<HeldWorker>{Stopped(5, 2)});
  REQUIRE(c.Step(c_kv, std::nullopt).ok());
  CHECK(c.Elsewhere().empty());

  // Another round's log is another's: a new round starts with nothing held.
  PauseLog next(keys, 3, "b");
  REQUIRE(next.Step(b_kv, std::nullopt).ok());
  CHECK(next.Elsewhere().empty());
}

TEST_CASE("pause log: a store gone is a failure, and what it cannot read is skipped") {
  LocalStore store;
  const RendezvousKeys keys("job");
  auto kv = store.Connect();
  REQUIRE(kv.Set(keys.Pause(0, 1), "no newline").ok());
  REQUIRE(kv.Set(keys.Pause(0, 2), "x\nnot a worker").ok());
  REQUIRE(kv.Set(keys.Pause(0, 3), "y\n" + Stopped(2, 1).Encode()).ok());
  PauseLog log(keys, 0, "z");
  REQUIRE(log.Step(kv, std::nullopt).ok());
  CHECK(log.Elsewhere() == std::vector<HeldWorker>{Stopped(2, 1)});
  CHECK(log.NextKey() == keys.Pause(0, 4));
  store.SetDown(true);
  CHECK_FALSE(log.Step(kv, std::nullopt).ok());
}

std::unique_ptr<StoreServer> Serve() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  auto server = StoreServer::Start(o);
  REQUIRE(server.ok());
  return std::move(*server);
}

template <typename Pred>
bool Within(std::chrono::milliseconds limit, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Two agents' boards on one store, agent a's worker stopped and b told of it.
struct TwoBoards {
  explicit TwoBoards(int round) : server(Serve()) {
    RendezvousSettings s;
    s.run_id = "job";
    s.read_timeout = std::chrono::seconds(5);
    auto started_a = PauseBoard::Start("127.0.0.1", server->port(), s, round, "a");
    auto started_b = PauseBoard::Start("127.0.0.1", server->port(), s, round, "b");
    REQUIRE(started_a.ok());
    REQUIRE(started_b.ok());
    a = std::move(*started_a);
    b = std::move(*started_b);
    a->Tell(Stopped(1, 0));
    // b waits on the next event's key: it learns at once, a tells within its look.
    REQUIRE(Within(std::chrono::seconds(10), [&] { return !b->Elsewhere().empty(); }));
  }
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<PauseBoard> a;
  std::unique_ptr<PauseBoard> b;
};

TEST_CASE("pause board: a stop told on one node is read on the other, and its end") {
  TwoBoards boards(1);
  CHECK(boards.b->Elsewhere() == std::vector<HeldWorker>{Stopped(1, 0)});
  CHECK(boards.a->Elsewhere().empty());
  boards.a->Tell(HeldWorker{});
  CHECK(Within(std::chrono::seconds(10), [&] { return boards.b->Elsewhere().empty(); }));
}

TEST_CASE("pause board: one that ends while its worker holds the job says it runs again first") {
  TwoBoards boards(0);
  boards.a.reset();  // its group ended (the worker continued and exited before a look)
  // Told before the board was gone: else b would wait for ever.
  CHECK(Within(std::chrono::seconds(10), [&] { return boards.b->Elsewhere().empty(); }));
}

TEST_CASE("pause board: the store gone leaves nothing held elsewhere, and ends at once") {
  TwoBoards boards(0);
  boards.server.reset();
  CHECK(Within(std::chrono::seconds(10), [&] { return boards.b->Elsewhere().empty(); }));
  const auto start = std::chrono::steady_clock::now();
  boards.a.reset();  // held, but nobody to tell
  CHECK(std::chrono::steady_clock::now() - start < PauseBoard::kLastWord);
}

}  // namespace
}  // namespace ddprun::rendezvous
