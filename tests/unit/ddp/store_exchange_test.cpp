#include "ddp/store_exchange.hpp"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store_server.hpp"

namespace ddprun::ddp {
namespace {

using std::chrono::milliseconds;

// A store on loopback and one client per rank.
struct Store {
  std::unique_ptr<rendezvous::StoreServer> server;
  rendezvous::StoreClient Client() {
    auto c =
        rendezvous::StoreClient::Connect("127.0.0.1", server->port(), std::chrono::seconds(10));
    REQUIRE(c.ok());
    return std::move(*c);
  }
};

Store Start() {
  rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  auto server = rendezvous::StoreServer::Start(options);
  REQUIRE(server.ok());
  return Store{std::move(*server)};
}

TEST_CASE("ExchangeThroughStore gives every rank every record in rank order") {
  Store store = Start();
  std::vector<StatusOr<std::vector<std::string>>> got(3, Internal("not run"));
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      auto client = store.Client();
      got[static_cast<size_t>(r)] =
          ExchangeThroughStore(client, "x/", r, 3, "dev" + std::to_string(r), milliseconds(5000));
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& g : got) {
    REQUIRE(g.ok());
    CHECK(*g == std::vector<std::string>{"dev0", "dev1", "dev2"});
  }
}

TEST_CASE("ExchangeThroughStore names the ranks that never arrived") {
  Store store = Start();
  auto client = store.Client();
  auto other = store.Client();
  REQUIRE(other.Set("y/1", "dev1").ok());
  const auto got = ExchangeThroughStore(client, "y/", 0, 4, "dev0", milliseconds(300));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(got.status().message().find(
            "rank(s) 2,3 did not arrive within 0.3 s (no record under y/)") != std::string::npos);
  // The connection is still good after the cancelled wait.
  CHECK(client.Get("y/0").ok());
}

}  // namespace
}  // namespace ddprun::ddp
