#include "supervisor/hang_check.hpp"

#include <doctest/doctest.h>

namespace ddprun::supervisor {
namespace {

using std::chrono::milliseconds;
const SteadyTime kT0{};  // a made-up clock: every time is kT0 + something

Beat Running(int rank, milliseconds last, bool beaten = true) {
  return Beat{true, rank, rank, 100 + rank, kT0 + last, kT0 + last, beaten, false, ""};
}

TEST_CASE("a hung worker's report tells the silence its limit counted and the clock's") {
  HangLimits limits{Duration(10), Duration(0)};
  Beat paused = Running(0, milliseconds(4000));  // last beat at +1 s, 3 s of pause left out
  paused.seen = kT0 + milliseconds(1000);
  auto v = FindHung({paused}, limits, kT0 + milliseconds(14000));
  REQUIRE(v.report.hung.size() == 1);
  CHECK(v.report.hung[0].silent_seconds == doctest::Approx(10.0));
  CHECK(v.report.hung[0].quiet_seconds == doctest::Approx(13.0));
}

TEST_CASE("a worker silent past --hang_timeout is hung; one that beat since is not") {
  HangLimits limits{Duration(10), Duration(0)};
  std::vector<Beat> beats = {Running(0, milliseconds(0)), Running(1, milliseconds(5000))};
  auto v = FindHung(beats, limits, kT0 + milliseconds(9999));
  CHECK(v.hung.empty());
  CHECK(v.report.beating_ranks == std::vector<int>{0, 1});
  v = FindHung(beats, limits, kT0 + milliseconds(10000));
  REQUIRE(v.hung.size() == 1);
  CHECK(v.hung[0].index == 0);
  CHECK(v.hung[0].why == "hung: no heartbeat for 10.0 s (--hang_timeout=10)");
  CHECK(v.report.beating_ranks == std::vector<int>{1});
  CHECK(v.report.running.size() == 2);
}

TEST_CASE("a rank whose heartbeat file cannot be written is not hung for its silence") {
  // Attack 102: a log directory made read-only (immutable) while the job ran: the hook's touches
  // failed, and ranks that trained on were killed as "hung: no heartbeat".
  HangLimits limits{Duration(10), Duration(0)};
  Beat stuck = Running(0, milliseconds(0));
  stuck.cannot_beat = "Operation not permitted";
  auto v = FindHung({stuck, Running(1, milliseconds(0))}, limits, kT0 + milliseconds(10000));
  REQUIRE(v.hung.size() == 1);
  CHECK(v.hung[0].index == 1);
  // A finishing one is held to its exit, which it needs no file for.
  stuck.finishing = true;
  limits.exit_timeout = Duration(5);
  CHECK(FindHung({stuck}, limits, kT0 + milliseconds(10000)).hung.size() == 1);
}

TEST_CASE("once one rank is hung, a rank silent for nine tenths of the limit is hung too") {
  HangLimits limits{Duration(2), Duration(0)};
  // Rank 1 beat 0.15 s after rank 0: stuck in the same collective, its file time a tick later.
  std::vector<Beat> beats = {Running(0, milliseconds(0)), Running(1, milliseconds(150)),
                             Running(2, milliseconds(1500))};
  auto v = FindHung(beats, limits, kT0 + milliseconds(2000));
  REQUIRE(v.hung.size() == 2);
  CHECK(v.hung[1].index == 1);
  // Said so: "1.9 s (--hang_timeout=2)" alone reads as a contradiction.
  CHECK(v.hung[1].why ==
        "hung: no heartbeat for 1.9 s, within 0.1 s of the limit another worker passed "
        "(--hang_timeout=2)");
  CHECK(v.report.beating_ranks == std::vector<int>{2});
  // Without a rank past its limit there is no slack.
  v = FindHung(beats, limits, kT0 + milliseconds(1990));
  CHECK(v.hung.empty());
}

TEST_CASE("the first beat has its own limit, and limits of 0 turn the checks off") {
  std::vector<Beat> beats = {Running(0, milliseconds(0), false), Running(1, milliseconds(0))};
  auto v = FindHung(beats, {Duration(10), Duration(3)}, kT0 + milliseconds(3000));
  REQUIRE(v.hung.size() == 1);
  CHECK(v.hung[0].why == "hung: no first heartbeat 3.0 s after start (--startup_timeout=3)");
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

Beat Finishing(int rank, milliseconds seen) {
  Beat b = Running(rank, seen);
  b.finishing = true;
  return b;
}

TEST_CASE(
    "a finishing worker has --exit_timeout from when it was seen finishing, then is hung at exit") {
  HangLimits limits{Duration(10), Duration(0), Duration(4)};
  // Rank 1 removed its heartbeat file, seen at 20 s: no beat is due, only its exit by 24 s.
  std::vector<Beat> beats = {Running(0, milliseconds(19000)), Finishing(1, milliseconds(20000))};
  auto v = FindHung(beats, limits, kT0 + milliseconds(23999));
  CHECK(v.hung.empty());
  CHECK(v.report.beating_ranks == std::vector<int>{0});  // finishing is not beating
  v = FindHung(beats, limits, kT0 + milliseconds(24000));
  REQUIRE(v.hung.size() == 1);
  CHECK(v.hung[0].index == 1);
  CHECK(v.hung[0].at_exit);
  CHECK(v.hung[0].why ==
        "hung at exit: removed its heartbeat file 4.0 s ago and has not exited "
        "(--exit_timeout=4)");
  REQUIRE(v.report.hung.size() == 1);
  CHECK(v.report.hung[0].finishing);
  // A silent rank past --hang_timeout is hung, not at exit.
  v = FindHung(beats, limits, kT0 + milliseconds(29000));
  REQUIRE(v.hung.size() == 2);
  CHECK_FALSE(v.hung[0].at_exit);
  // --exit_timeout=0: a finishing worker is awaited without a bound.
  limits.exit_timeout = Duration(0);
  v = FindHung({Finishing(1, milliseconds(0))}, limits, kT0 + milliseconds(999999));
  CHECK(v.hung.empty());
  // Looked at again only to see whether it beats again (see below).
  CHECK(NextHangCheck({Finishing(1, milliseconds(0))}, limits, kT0) == kT0 + milliseconds(10000));
}

TEST_CASE("a finishing worker is looked at within --hang_timeout: it may create its file again") {
  // A process group destroyed (file removed) and made again (file created):
  // the look that sees the new file must come within a hang limit, not at the
  // exit limit, or a hang after the new group is found only at --exit_timeout.
  auto next = NextHangCheck({Finishing(1, milliseconds(0))},
                            {Duration(3), Duration(0), Duration(40)}, kT0 + milliseconds(1000));
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(4000));
  next = NextHangCheck({Finishing(1, milliseconds(0))}, {Duration(3), Duration(0), Duration(0)},
                       kT0 + milliseconds(1000));
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(4000));
}

TEST_CASE("with an exit limit, workers are looked at within a quarter of it for a removed file") {
  HangLimits limits{Duration(300), Duration(0), Duration(10)};
  std::vector<Beat> beats = {Running(0, milliseconds(0))};
  auto next = NextHangCheck(beats, limits, kT0 + milliseconds(1000));
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(3500));
  beats.push_back(Finishing(1, milliseconds(0)));
  next = NextHangCheck(beats, limits, kT0 + milliseconds(1000));
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(3500));
  next = NextHangCheck({Finishing(1, milliseconds(0))}, limits, kT0 + milliseconds(1000));
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(10000));
  // Without --hang_timeout, an exit limit alone still holds finishing workers.
  next = NextHangCheck(beats, {Duration(0), Duration(0), Duration(10)}, kT0);
  REQUIRE(next);
  CHECK(*next == kT0 + milliseconds(2500));
}

}  // namespace
}  // namespace ddprun::supervisor
