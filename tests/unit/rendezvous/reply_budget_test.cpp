#include "rendezvous/reply_budget.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <vector>

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using Time = ReplyBudget::Time;

const Time kT0 = Time() + std::chrono::hours(1);

ReplyLimits Small() {
  ReplyLimits l;
  l.max_total = 100;
  l.stalled_after = milliseconds(1000);
  l.look_every = milliseconds(100);
  l.small_reply = 10;
  return l;
}

TEST_CASE("a connection's next request waits until its socket took its replies") {
  ReplyBudget b(Small());
  CHECK(b.MayRead(1));
  b.Update(1, 40, 40, kT0);
  CHECK_FALSE(b.MayRead(1));
  CHECK(b.MayRead(2));  // another connection is not held back under the bound
  CHECK(b.total() == 40);
  b.Update(1, 40, 10, kT0 + milliseconds(5));  // taken in part: the reply is still held
  CHECK_FALSE(b.MayRead(1));
  b.Update(1, 0, 0, kT0 + milliseconds(6));
  CHECK(b.MayRead(1));
  CHECK(b.total() == 0);
  CHECK(b.Holders().empty());
}

TEST_CASE("over the bound only small replies are made, and none is closed while replies move") {
  ReplyBudget b(Small());
  CHECK(b.MayMake(1000));
  for (ClientId id = 1; id <= 3; ++id) b.Update(id, 40, 40, kT0);
  CHECK(b.over());
  CHECK(b.MayRead(4));  // its request is read: a keep-alive, a counter
  CHECK(b.MayMake(10));
  CHECK_FALSE(b.MayMake(11));  // a large value's reply waits
  CHECK(b.NextLook(kT0) == kT0 + milliseconds(100));
  // Readers that take their replies a little at a time are never stalled.
  for (int step = 1; step <= 30; ++step) {
    const Time now = kT0 + milliseconds(100 * step);
    for (ClientId id = 1; id <= 3; ++id) b.Update(id, 40, 40 - step, now);
    CHECK(b.Stalled(now).empty());
  }
  b.Update(3, 0, 0, kT0 + milliseconds(3100));
  CHECK_FALSE(b.over());
  CHECK(b.MayMake(1000));
  CHECK(b.NextLook(kT0 + milliseconds(3100)) == std::nullopt);
}

TEST_CASE("over the bound the stalled are closed, the most held first, until the rest fit") {
  ReplyBudget b(Small());
  b.Update(1, 30, 30, kT0);
  b.Update(2, 50, 50, kT0);
  b.Update(3, 30, 30, kT0);
  b.Update(4, 20, 20, kT0);  // 130 held: 30 over
  CHECK(b.Stalled(kT0 + milliseconds(999)).empty());
  // 2 (the most) alone brings it under the bound.
  CHECK(b.Stalled(kT0 + milliseconds(1000)) == std::vector<ClientId>{2});
  // One that moved is spared even when it holds most.
  b.Update(2, 50, 49, kT0 + milliseconds(900));
  CHECK(b.Stalled(kT0 + milliseconds(1000)) == std::vector<ClientId>{1});
  b.Remove(1);
  CHECK(b.total() == 100);
  CHECK_FALSE(b.over());
  CHECK(b.Stalled(kT0 + milliseconds(5000)).empty());  // under the bound nothing is closed
}

TEST_CASE("several stalled connections are closed when one is not enough") {
  ReplyBudget b(Small());
  for (ClientId id = 1; id <= 10; ++id) b.Update(id, 25, 25, kT0);  // 250 held
  const std::vector<ClientId> closed = b.Stalled(kT0 + milliseconds(1000));
  CHECK(closed == std::vector<ClientId>{1, 2, 3, 4, 5, 6});  // 250 - 6 * 25 = 100
}

TEST_CASE("a closing connection's replies count until freed, and it is not closed again") {
  ReplyBudget b(Small());
  b.Update(1, 60, 60, kT0);
  b.Update(2, 60, 60, kT0);
  b.Update(3, 60, 60, kT0);  // 180 held: 80 over
  const Time later = kT0 + milliseconds(1000);
  CHECK(b.Stalled(later) == std::vector<ClientId>{1, 2});
  b.Closing(1);
  CHECK(b.total() == 180);  // not freed yet: still over, large replies still wait
  CHECK_FALSE(b.MayMake(1000));
  CHECK(b.Stalled(later) == std::vector<ClientId>{2});  // 1's bytes are going already
  b.Update(1, 0, 0, later);                             // its writes cancelled: freed
  b.Remove(1);
  CHECK(b.total() == 120);
}

TEST_CASE("unknown connections are ignored and an empty update adds nothing") {
  ReplyBudget b(Small());
  b.Remove(7);
  b.Update(7, 0, 0, kT0);
  CHECK(b.Holders().empty());
  CHECK(b.held(7) == 0);
}

}  // namespace
}  // namespace ddprun::rendezvous
