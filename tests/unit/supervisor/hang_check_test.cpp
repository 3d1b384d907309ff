#include "supervisor/hang_check.hpp"

#include <doctest/doctest.h>

namespace ddprun::supervisor {
namespace {

using std::chrono::milliseconds;
const SteadyTime kT0{};  // a made-up clock: every time is kT0 + something

Beat Running(int rank, milliseconds last, bool beaten = true) {
  return Beat{true, rank, rank, 100 + rank, kT0 + last, beaten};
}

TEST_CASE("a worker silent past --hang_timeout is hung; one that beat since is not") {
  HangLimits limits{Duration(10), Duration(0)};
  std::vector<Beat> beats = {Running(0, milliseconds(0)), Running(1, milliseconds(5000))};
  auto v = FindHung(beats, limits, kT0 + milliseconds(9999));
  CHECK(v.hung.empty());
  CHECK(v.report.beating_ranks == std::vector<int>{0, 1});
  v = FindHung(beats, limits, kT0 + milliseconds(10000));
  REQUIRE(v.hung.size() == 1);
  CHECK(v.hung[0].first == 0);
  CHECK(v.hung[0].second == "hung: no heartbeat for 10.0 s (--hang_timeout=10)");
  CHECK(v.report.beating_ranks == std::vector<int>{1});
  CHECK(v.report.running.size() == 2);
}

TEST_CASE("once one rank is hung, a rank silent for nine tenths of the limit is hung too") {
  HangLimits limits{Duration(2), Duration(0)};
  // Rank 1 beat 0.15 s after rank 0: stuck in the same collective, its file time a tick later.
  std::vector<Beat> beats = {Running(0, milliseconds(0)), Running(1, milliseconds(150)),
                             Running(2, milliseconds(1500))};
  auto v = FindHung(beats, limits, kT0 + milliseconds(2000));
  REQUIRE(v.hung.size() == 2);
  CHECK(v.hung[1].first == 1);
  CHECK(v.report.beating_ranks == std::vector<int>{2});
  // Without a rank past its limit there is no slack.
  v = FindHung(beats, limits, kT0 + milliseconds(1990));
  CHECK(v.hung.empty());
}

TEST_CASE("the first beat has its own limit, and limits of 0 turn the checks off") {
  std::vector<Beat> beats = {Running(0, milliseconds(0), false), Running(1, milliseconds(0))};
  auto v = FindHung(beats, {Duration(10), Duration(3)}, kT0 + milliseconds(3000));
  REQUIRE(v.hung.size() == 1);
  CHECK(v.hung[0].second == "hung: no first heartbeat 3.0 s after start (--startup_timeout=3)");
  CHECK(FindHung(beats, {Duration(0), Duration(0)}, kT0 + milliseconds(999999)).hung.empty());
  beats[1].running = false;  // exited workers are never hung
  beats[1].last = kT0;
  CHECK(FindHung(beats, {Duration(1), Duration(0)}, kT0 + milliseconds(5000)).hung.empty());
}

TEST_CASE("the next check is the earliest deadline of a running worker") {
  std::vector<Beat> beats = {Running(0, milliseconds(4000)), Running(1, milliseconds(1000)),
                             Running(2, milliseconds(0), false)};
  auto next = NextHangCheck(beats, {Duration(10), Duration(30)}, kT0 + milliseconds(5000));
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(11000));
  // Without a startup limit, a worker yet to beat is looked at again a hang timeout from now.
  next = NextHangCheck({Running(0, milliseconds(0), false)}, {Duration(10), Duration(0)},
                       kT0 + milliseconds(5000));
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(15000));
  CHECK_FALSE(NextHangCheck(beats, {Duration(0), Duration(0)}, kT0));
}

}  // namespace
}  // namespace ddprun::supervisor
