#include "rendezvous/store_guard.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <vector>

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using Time = StoreGuard::Time;

const Time kT0 = Time() + std::chrono::hours(1);

GuardLimits Small() {
  GuardLimits g;
  g.handshake_timeout = milliseconds(1000);
  g.handshake_bytes = 100;
  g.max_handshaking = 3;
  g.evict_after = milliseconds(100);
  g.max_handshaking_hard = 4;
  g.max_connections_per_host = 4;
  g.auth_backoff = milliseconds(100);
  g.auth_backoff_max = milliseconds(400);
  g.auth_forget = milliseconds(10'000);
  g.max_auth_queue = 2;
  return g;
}

TEST_CASE("a connection in the handshake expires at its deadline, a ready one never") {
  StoreGuard g(Small());
  REQUIRE(g.Connect(1, "a", kT0).admitted);
  REQUIRE(g.Connect(2, "a", kT0 + milliseconds(10)).admitted);
  g.Ready(2);
  CHECK(g.NextDeadline() == kT0 + milliseconds(1000));
  CHECK(g.Expired(kT0 + milliseconds(999)).empty());
  CHECK(g.Expired(kT0 + milliseconds(1000)) == std::vector<ClientId>{1});
  g.Disconnect(1);
  CHECK(g.Expired(kT0 + std::chrono::hours(24)).empty());
  CHECK(g.NextDeadline() == std::nullopt);
}

TEST_CASE("handshake bytes are bounded until the connection is ready") {
  StoreGuard g(Small());
  REQUIRE(g.Connect(1, "a", kT0).admitted);
  CHECK(g.HandshakeBytesLeft(1) == 100);
  CHECK(g.CountHandshakeBytes(1, 60));
  CHECK(g.HandshakeBytesLeft(1) == 40);
  CHECK(g.CountHandshakeBytes(1, 40));
  CHECK_FALSE(g.CountHandshakeBytes(1, 1));
  REQUIRE(g.Connect(2, "a", kT0).admitted);
  g.Ready(2);
  CHECK(g.CountHandshakeBytes(2, 1 << 30));
}

TEST_CASE("over the handshake limit the oldest connection of the busiest host is evicted") {
  StoreGuard g(Small());
  REQUIRE(g.Connect(1, "friend", kT0).admitted);
  REQUIRE(g.Connect(2, "flood", kT0).admitted);
  REQUIRE(g.Connect(3, "flood", kT0 + milliseconds(1)).admitted);
  StoreGuard::Admission a = g.Connect(4, "flood", kT0 + milliseconds(100));
  CHECK(a.admitted);
  CHECK(a.evict == ClientId{2});
  g.Disconnect(2);
  CHECK(g.handshaking() == 3);
  // A ready connection does not count.
  g.Ready(1);
  CHECK(g.Connect(5, "friend", kT0 + milliseconds(100)).evict == std::nullopt);
}

TEST_CASE("a burst younger than evict_after is admitted up to the hard limit") {
  StoreGuard g(Small());
  for (ClientId id = 1; id <= 4; ++id) {
    StoreGuard::Admission a = g.Connect(id, id < 4 ? "a" : "b", kT0 + milliseconds(id));
    CHECK(a.admitted);
    CHECK(a.evict == std::nullopt);
  }
  StoreGuard::Admission over = g.Connect(5, "c", kT0 + milliseconds(50));
  CHECK_FALSE(over.admitted);
  CHECK(over.refusal == "4 connections are in the handshake (the limit) and none for long");
  // Once the oldest of the busiest host has waited for evict_after, it makes room.
  CHECK(g.Connect(6, "c", kT0 + milliseconds(101)).evict == ClientId{1});
}

TEST_CASE("a host over its connection limit is refused, others are not") {
  StoreGuard g(Small());
  for (ClientId id = 1; id <= 4; ++id) {
    REQUIRE(g.Connect(id, "a", kT0).admitted);
    g.Ready(id);
  }
  StoreGuard::Admission a = g.Connect(5, "a", kT0);
  CHECK_FALSE(a.admitted);
  CHECK(a.refusal == "host a already has 4 connections (the per-host limit)");
  CHECK(g.Connect(6, "b", kT0).admitted);
  g.Disconnect(1);
  CHECK(g.Connect(7, "a", kT0).admitted);
}

TEST_CASE("failed AUTHs space their host's next verdicts, doubling up to the maximum") {
  StoreGuard g(Small());
  REQUIRE(g.Connect(1, "a", kT0).admitted);
  CHECK(g.Auth(1, kT0) == StoreGuard::Turn::kNow);
  g.Judged(1, false, kT0);
  g.Disconnect(1);
  Time t = kT0;
  ClientId id = 1;
  for (int delay : {100, 200, 400, 400}) {
    ++id;
    REQUIRE(g.Connect(id, "a", t).admitted);
    REQUIRE(g.Auth(id, t) == StoreGuard::Turn::kQueued);
    CHECK(g.NextDeadline() == t + milliseconds(delay));
    CHECK(g.NextDueAuth(t + milliseconds(delay - 1)) == std::nullopt);
    t += milliseconds(delay);
    CHECK(g.NextDueAuth(t) == id);
    g.Judged(id, false, t);
    g.Disconnect(id);
  }
  // Another host is judged at once.
  REQUIRE(g.Connect(100, "b", t).admitted);
  CHECK(g.Auth(100, t) == StoreGuard::Turn::kNow);
}

TEST_CASE("AUTHs waiting for their host's turn are bounded and leave with their connection") {
  StoreGuard g(Small());
  REQUIRE(g.Connect(1, "a", kT0).admitted);
  g.Judged(1, false, kT0);
  REQUIRE(g.Connect(2, "a", kT0).admitted);
  REQUIRE(g.Connect(3, "a", kT0).admitted);
  CHECK(g.Auth(2, kT0) == StoreGuard::Turn::kQueued);
  CHECK(g.Auth(3, kT0) == StoreGuard::Turn::kQueued);
  g.Disconnect(1);
  REQUIRE(g.Connect(4, "a", kT0).admitted);
  CHECK(g.Auth(4, kT0) == StoreGuard::Turn::kRefused);
  g.Disconnect(2);
  CHECK(g.NextDueAuth(kT0 + milliseconds(100)) == ClientId{3});
}

TEST_CASE("a right token clears the failures; so does a quiet spell") {
  StoreGuard g(Small());
  REQUIRE(g.Connect(1, "a", kT0).admitted);
  g.Judged(1, false, kT0);
  REQUIRE(g.Connect(2, "a", kT0).admitted);
  REQUIRE(g.Auth(2, kT0) == StoreGuard::Turn::kQueued);
  REQUIRE(g.NextDueAuth(kT0 + milliseconds(100)) == ClientId{2});
  g.Judged(2, true, kT0 + milliseconds(100));
  REQUIRE(g.Connect(3, "a", kT0).admitted);
  CHECK(g.Auth(3, kT0 + milliseconds(100)) == StoreGuard::Turn::kNow);
  g.Judged(3, false, kT0 + milliseconds(100));
  for (ClientId done : {1, 2, 3}) g.Disconnect(done);
  // 10 s later the failure is forgotten: the next one waits 100 ms, not 200.
  const Time later = kT0 + milliseconds(10'100);
  REQUIRE(g.Connect(4, "a", later).admitted);
  CHECK(g.Auth(4, later) == StoreGuard::Turn::kNow);
  g.Judged(4, false, later);
  REQUIRE(g.Connect(5, "a", later).admitted);
  REQUIRE(g.Auth(5, later) == StoreGuard::Turn::kQueued);
  CHECK(g.NextDeadline() == later + milliseconds(100));
}

}  // namespace
}  // namespace ddprun::rendezvous
