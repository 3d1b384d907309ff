#include "base/pause_clock.hpp"

#include <doctest/doctest.h>

#include <chrono>

namespace ddprun {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyTime = PauseClock::Time;

TEST_CASE("looks at the tick's pace discount nothing while no worker is stopped") {
  PauseClock c;
  const SteadyTime t0{};
  c.Start(t0);
  for (int i = 1; i <= 10; ++i) {
    const PauseLook look = c.Look(t0 + i * PauseClock::kTick, false);
    CHECK(look.discounted.count() == 0);
    CHECK_FALSE(look.self_gap);
  }
  // A look between ticks (a hang check) is no gap either.
  CHECK(c.Look(t0 + 10 * PauseClock::kTick + milliseconds(100), false).discounted.count() == 0);
}

TEST_CASE("a look far later than the tick means the launcher did not run: all of it is left out") {
  PauseClock c;
  const SteadyTime t0{};
  c.Start(t0);
  c.Look(t0 + milliseconds(500), false);
  const PauseLook look = c.Look(t0 + seconds(30), false);  // SIGSTOPped, frozen, suspended
  CHECK(look.self_gap);
  CHECK(look.discounted == seconds(30) - milliseconds(500));
  // Just under the bound: a late tick on a busy host, counted as usual.
  const PauseLook late =
      c.Look(t0 + seconds(30) + PauseClock::kTick + PauseClock::kLate - milliseconds(1), false);
  CHECK_FALSE(late.self_gap);
  CHECK(late.discounted.count() == 0);
}

TEST_CASE(
    "the time a worker is stopped is left out, from the look that sees it to the first that "
    "does not") {
  PauseClock c;
  const SteadyTime t0{};
  c.Start(t0);
  CHECK(c.Look(t0 + milliseconds(500), true).discounted == milliseconds(500));
  CHECK(c.Look(t0 + milliseconds(1000), true).discounted == milliseconds(500));
  const PauseLook resumed = c.Look(t0 + milliseconds(1500), false);  // it ran again meanwhile
  CHECK(resumed.discounted == milliseconds(500));
  CHECK_FALSE(resumed.self_gap);
  CHECK(c.Look(t0 + milliseconds(2000), false).discounted.count() == 0);
}

TEST_CASE("time the launcher was busy on purpose is skipped, not taken for a gap") {
  PauseClock c;
  const SteadyTime t0{};
  c.Start(t0);
  c.Skip(t0 + seconds(5));  // a debug dump on request; its caller leaves the 5 s out itself
  const PauseLook look = c.Look(t0 + seconds(5) + milliseconds(500), false);
  CHECK_FALSE(look.self_gap);
  CHECK(look.discounted.count() == 0);
}

TEST_CASE("a new group starts with nothing paused and no gap since the last one") {
  PauseClock c;
  c.Start(SteadyTime{});
  c.Look(SteadyTime{} + milliseconds(500), true);
  const SteadyTime later = SteadyTime{} + seconds(100);
  c.Start(later);
  CHECK(c.Look(later + milliseconds(500), false).discounted.count() == 0);
}

}  // namespace
}  // namespace ddprun
