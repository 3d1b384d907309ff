// The supervision state machine against a fake process layer and timer.
#include "supervisor/group_state.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <vector>

namespace ddprun::supervisor {
namespace {

struct FakeControl : ProcessControl {
  std::vector<std::pair<pid_t, int>> sent;
  std::vector<pid_t> stopped;  // in state T
  void SignalGroup(pid_t pgid, int sig) override { sent.emplace_back(pgid, sig); }
  char StoppedState(pid_t pid) override {
    return std::count(stopped.begin(), stopped.end(), pid) > 0 ? 'T' : 0;
  }
};

// The signals a stop sends: `sig` to each worker, then SIGCONT to each (a
// stopped worker acts on `sig` only once continued).
std::vector<std::pair<pid_t, int>> Stop(int sig, const std::vector<pid_t>& pids) {
  std::vector<std::pair<pid_t, int>> out;
  for (int s : {sig, SIGCONT}) {
    for (pid_t p : pids) out.emplace_back(p, s);
  }
  return out;
}

struct FakeTimer : Timer {
  bool armed = false;
  double after = 0;
  void Arm(Duration d) override { armed = true, after = d.count(); }
  void Cancel() override { armed = false; }
};

struct Fixture {
  FakeControl control;
  FakeTimer timer;
  GroupOptions options;
  WallTime now = std::chrono::system_clock::now();

  GroupState Make(int n) {
    options.shutdown_timeout = Duration(30);
    options.kill_timeout = Duration(10);
    options.forward_only = {SIGUSR1};
    GroupState s(options, &control, &timer);
    for (int i = 0; i < n; ++i) s.AddWorker(i, i, 100 + i);
    return s;
  }
};

TEST_CASE_FIXTURE(Fixture, "all workers succeeding ends the group with success and no signals") {
  GroupState s = Make(3);
  s.OnExits({{100, ExitStatus::Exited(0)}, {101, ExitStatus::Exited(0)}}, now);
  CHECK_FALSE(s.done());
  s.OnExits({{102, ExitStatus::Exited(0)}}, now);
  CHECK(s.done());
  CHECK(s.outcome() == Outcome::kSucceeded);
  CHECK(control.sent.empty());
}

TEST_CASE_FIXTURE(Fixture, "first failure sends SIGTERM to every survivor and arms the grace") {
  GroupState s = Make(3);
  s.OnExits({{101, ExitStatus::Exited(3)}}, now);
  CHECK(s.phase() == Phase::kStopping);
  CHECK(control.sent == Stop(SIGTERM, {100, 102}));
  CHECK(timer.armed);
  CHECK(timer.after == doctest::Approx(30));
  s.OnExits({{100, ExitStatus::Signaled(SIGTERM)}, {102, ExitStatus::Signaled(SIGTERM)}}, now);
  CHECK(s.done());
  CHECK_FALSE(timer.armed);
  CHECK(s.outcome() == Outcome::kFailed);
  REQUIRE(s.failures().size() == 1);
  CHECK(s.workers()[s.failures()[0]].local_rank == 1);
  CHECK(s.workers()[0].state == WorkerState::kStopped);
}

TEST_CASE_FIXTURE(Fixture, "a worker found stopped as the group stops is marked so") {
  // Rank 0 SIGSTOPped; rank 1 timed out in a collective waiting for it.
  GroupState s = Make(3);
  control.stopped = {100};
  s.OnExits({{101, ExitStatus::Exited(1)}}, now);
  CHECK(s.workers()[0].stopped_at_stop == 'T');
  CHECK(s.workers()[1].stopped_at_stop == 0);  // it had exited
  CHECK(s.workers()[2].stopped_at_stop == 0);
}

TEST_CASE_FIXTURE(Fixture, "failures reaped together all count, exits after the teardown do not") {
  GroupState s = Make(3);
  s.OnExits({{100, ExitStatus::Exited(1)}, {102, ExitStatus::Signaled(SIGSEGV)}}, now);
  CHECK(s.failures().size() == 2);
  s.OnExits({{101, ExitStatus::Exited(1)}}, now);
  CHECK(s.failures().size() == 2);
  CHECK(s.workers()[1].state == WorkerState::kStopped);
}

TEST_CASE_FIXTURE(Fixture, "grace expiry escalates to SIGKILL, then abandons the unkillable") {
  GroupState s = Make(2);
  s.OnExits({{100, ExitStatus::Exited(1)}}, now);
  control.sent.clear();
  s.OnTimer();
  CHECK(s.phase() == Phase::kKilling);
  CHECK(control.sent == std::vector<std::pair<pid_t, int>>{{101, SIGKILL}});
  CHECK(timer.after == doctest::Approx(10));
  s.OnTimer();
  CHECK(s.done());
  CHECK(s.workers()[1].state == WorkerState::kAbandoned);
  CHECK(s.outcome() == Outcome::kFailed);
}

TEST_CASE_FIXTURE(Fixture,
                  "a handled signal is forwarded as itself and the outcome is interrupted") {
  GroupState s = Make(2);
  s.OnSignal(SIGINT, now);
  CHECK(control.sent == Stop(SIGINT, {100, 101}));
  s.OnExits({{100, ExitStatus::Signaled(SIGINT)}, {101, ExitStatus::Exited(0)}}, now);
  CHECK(s.done());
  CHECK(s.outcome() == Outcome::kInterrupted);
  CHECK(s.received_signal() == SIGINT);
}

TEST_CASE_FIXTURE(Fixture, "a burst of SIGTERMs is one request; a second Ctrl-C skips the grace") {
  GroupState s = Make(1);
  s.OnSignal(SIGTERM, now);
  s.OnSignal(SIGTERM, now);  // slurmstepd's second SIGTERM, 30 ms later
  s.OnSignal(SIGHUP, now);
  CHECK(control.sent == Stop(SIGTERM, {100}));
  CHECK(s.phase() == Phase::kStopping);
  GroupState t = Make(1);
  t.OnSignal(SIGINT, now);
  CHECK(t.phase() == Phase::kStopping);
  // One Ctrl-C seen twice (the terminal, and `timeout --foreground` passing it on): the grace
  // stays.
  t.OnSignal(SIGINT, now + std::chrono::milliseconds(1));
  CHECK(control.sent.back() == std::pair<pid_t, int>{100, SIGCONT});  // the first press's
  CHECK(t.phase() == Phase::kStopping);
  t.OnSignal(SIGINT, now + GroupState::kOnePress);  // pressed again
  CHECK(control.sent.back() == std::pair<pid_t, int>{100, SIGKILL});
  CHECK(t.phase() == Phase::kKilling);
}

TEST_CASE_FIXTURE(Fixture, "Ctrl-C while a failure stops the group skips the grace") {
  GroupState s = Make(2);
  s.OnExits({{101, ExitStatus::Exited(3)}}, now);
  s.OnSignal(SIGINT, now);
  CHECK(control.sent.back() == std::pair<pid_t, int>{100, SIGKILL});
  CHECK(s.outcome() == Outcome::kRunning);
}

TEST_CASE_FIXTURE(Fixture,
                  "workers that died of the signal the launcher then got are stopped, "
                  "not failed") {
  GroupState s = Make(2);
  // Slurm signals every process of the step: worker 1's death is read before ddprun's SIGTERM.
  s.OnExits({{101, ExitStatus::Signaled(SIGTERM)}}, now);
  CHECK(s.failures().size() == 1);
  s.OnSignal(SIGTERM, now);
  CHECK(s.failures().empty());
  CHECK(s.received_signal() == SIGTERM);
  s.OnExits({{100, ExitStatus::Signaled(SIGTERM)}}, now);
  CHECK(s.outcome() == Outcome::kInterrupted);
  // Also when every exit was read first: the group settles a moment for the
  // launcher's own copy (it restarted before it came: attack 87).
  GroupState t = Make(1);
  t.OnExits({{100, ExitStatus::Signaled(SIGINT)}}, now);
  CHECK_FALSE(t.done());
  CHECK(timer.armed);
  CHECK(timer.after == Duration(GroupState::kJobSignalSettle).count());
  t.OnSignal(SIGINT, now);
  CHECK(t.outcome() == Outcome::kInterrupted);
  CHECK_FALSE(timer.armed);
  // No copy within the settle time: a failure; one later still excuses it.
  GroupState v = Make(1);
  v.OnExits({{100, ExitStatus::Signaled(SIGTERM)}}, now);
  CHECK_FALSE(v.done());
  v.OnTimer();
  CHECK(v.outcome() == Outcome::kFailed);
  v.OnSignal(SIGTERM, now);
  CHECK(v.outcome() == Outcome::kInterrupted);
  // A worker that died of another signal stays a failure, at once.
  GroupState u = Make(1);
  u.OnExits({{100, ExitStatus::Signaled(SIGSEGV)}}, now);
  CHECK(u.done());
  u.OnSignal(SIGTERM, now);
  CHECK(u.outcome() == Outcome::kFailed);
}

TEST_CASE_FIXTURE(Fixture, "forward-only signals reach the workers without a teardown") {
  GroupState s = Make(2);
  s.OnSignal(SIGUSR1, now);
  CHECK(control.sent == std::vector<std::pair<pid_t, int>>{{100, SIGUSR1}, {101, SIGUSR1}});
  CHECK(s.phase() == Phase::kRunning);
  CHECK_FALSE(timer.armed);
}

TEST_CASE_FIXTURE(Fixture, "a worker that cannot start fails the group and stops the started") {
  GroupState s = Make(1);
  s.OnStartFailure(1, 1, ExitStatus::Exited(127), now, "start x: no such file");
  CHECK(control.sent == Stop(SIGTERM, {100}));
  s.OnExits({{100, ExitStatus::Signaled(SIGTERM)}}, now);
  CHECK(s.outcome() == Outcome::kFailed);
  CHECK(s.workers()[s.failures()[0]].start_error == "start x: no such file");
}

TEST_CASE_FIXTURE(Fixture, "unknown pids and repeated exits are ignored") {
  GroupState s = Make(1);
  s.OnExits({{999, ExitStatus::Exited(1)}}, now);
  CHECK(s.phase() == Phase::kRunning);
  s.OnExits({{100, ExitStatus::Exited(0)}, {100, ExitStatus::Exited(1)}}, now);
  CHECK(s.outcome() == Outcome::kSucceeded);
}

}  // namespace
}  // namespace ddprun::supervisor

namespace ddprun::supervisor {
namespace {

TEST_CASE_FIXTURE(Fixture, "hung workers fail the group like a crash and are torn down") {
  GroupState s = Make(3);
  s.OnHang({{1, "hung: no heartbeat for 3.0 s"}}, now);
  CHECK(s.phase() == Phase::kStopping);
  CHECK(control.sent == Stop(SIGTERM, {100, 101, 102}));
  REQUIRE(s.failures().size() == 1);
  CHECK(s.workers()[1].hang == "hung: no heartbeat for 3.0 s");
  s.OnExits({{100, ExitStatus::Signaled(SIGTERM)},
             {101, ExitStatus::Signaled(SIGTERM)},
             {102, ExitStatus::Signaled(SIGTERM)}},
            now + std::chrono::seconds(1));
  CHECK(s.done());
  CHECK(s.outcome() == Outcome::kFailed);
  CHECK(s.workers()[1].state == WorkerState::kFailed);  // the hung one stays the failure
  CHECK(s.workers()[0].state == WorkerState::kStopped);
  CHECK(s.workers()[1].exit_time == now);  // when it was declared hung, not when it died
}

TEST_CASE_FIXTURE(Fixture, "a worker hung at exit is recorded so") {
  GroupState s = Make(2);
  s.OnHang({{1, "hung at exit: removed its heartbeat file 3.0 s ago", true}}, now);
  REQUIRE(s.failures().size() == 1);
  CHECK(s.workers()[1].hang_at_exit);
  CHECK_FALSE(s.workers()[0].hang_at_exit);
}

TEST_CASE_FIXTURE(Fixture, "a worker that exited 0 before it was declared hung is a success") {
  // Found hung at exit, it exited while the dump was written: nothing to stop, no failure.
  GroupState s = Make(2);
  s.OnExits({{101, ExitStatus::Exited(0)}}, now);
  CHECK_FALSE(s.OnHang({{1, "hung at exit: removed its heartbeat file 1.0 s ago", true}}, now));
  CHECK(s.phase() == Phase::kRunning);
  CHECK(s.failures().empty());
  CHECK(control.sent.empty());
  s.OnExits({{100, ExitStatus::Exited(0)}}, now);
  CHECK(s.outcome() == Outcome::kSucceeded);
}

TEST_CASE_FIXTURE(Fixture, "a hang found after a crash changes nothing: the crash is the cause") {
  GroupState s = Make(2);
  s.OnExits({{100, ExitStatus::Exited(1)}}, now);
  s.OnHang({{1, "hung"}}, now);
  REQUIRE(s.failures().size() == 1);
  CHECK(s.workers()[s.failures()[0]].local_rank == 0);
  CHECK(s.workers()[1].hang.empty());
}

TEST_CASE_FIXTURE(Fixture, "a crash seen during the hang's dump comes after the hang it followed") {
  // Attack 79: rank 0, waiting in the collective, exited 3 while the dump was written; it became
  // the root cause of a hang found before it.
  GroupState s = Make(2);
  s.OnExits({{100, ExitStatus::Exited(3)}}, now + std::chrono::seconds(7));
  REQUIRE(s.phase() == Phase::kStopping);
  CHECK(s.OnHang({{0, "hung"}, {1, "hung: the others wait for it"}}, now));
  REQUIRE(s.failures().size() == 2);
  CHECK(s.failures()[0] == 1);  // the hang, found first
  CHECK(s.workers()[1].hang == "hung: the others wait for it");
  CHECK(s.workers()[0].hang.empty());  // it had exited: judged by its exit
  // A group stopped by a signal is not a hang's: nothing declared.
  GroupState t = Make(2);
  t.OnSignal(SIGTERM, now + std::chrono::seconds(1));
  CHECK_FALSE(t.OnHang({{1, "hung"}}, now));
  CHECK(t.workers()[1].hang.empty());
}

TEST_CASE_FIXTURE(Fixture, "an expired file timer fails its worker; its death is that failure") {
  GroupState s = Make(2);
  s.OnTimerExpired(1, "file timer 'step' expired after 1.0 s", now);
  CHECK(s.phase() == Phase::kStopping);
  CHECK(control.sent == Stop(SIGTERM, {100, 101}));
  // The SIGKILL the timer sent is not excused by a SIGKILL ddprun receives.
  s.OnExits({{101, ExitStatus::Signaled(SIGKILL)}}, now + std::chrono::seconds(1));
  s.OnExits({{100, ExitStatus::Signaled(SIGTERM)}}, now + std::chrono::seconds(1));
  CHECK(s.done());
  CHECK(s.outcome() == Outcome::kFailed);
  REQUIRE(s.failures() == std::vector<size_t>{1});
  CHECK(s.workers()[1].timer == "file timer 'step' expired after 1.0 s");
  CHECK(s.workers()[1].exit.signal == SIGKILL);
  CHECK(s.workers()[1].exit_time == now);
  CHECK(s.workers()[0].state == WorkerState::kStopped);
}

TEST_CASE_FIXTURE(Fixture, "a file timer expiring after a crash or for an exited worker is moot") {
  GroupState s = Make(2);
  s.OnExits({{100, ExitStatus::Exited(1)}}, now);
  s.OnTimerExpired(1, "file timer", now);
  CHECK(s.workers()[1].timer.empty());
  GroupState t = Make(2);
  t.OnExits({{100, ExitStatus::Exited(0)}}, now);
  t.OnTimerExpired(0, "file timer", now);
  t.OnTimerExpired(7, "file timer", now);  // no such worker
  CHECK(t.failures().empty());
  CHECK(t.phase() == Phase::kRunning);
}

TEST_CASE_FIXTURE(Fixture, "a stop request tears the group down with outcome stopped") {
  GroupState s = Make(2);
  s.OnStopRequest();
  CHECK(control.sent == Stop(SIGTERM, {100, 101}));
  s.OnExits({{100, ExitStatus::Signaled(SIGTERM)}, {101, ExitStatus::Signaled(SIGTERM)}}, now);
  CHECK(s.outcome() == Outcome::kStopped);
}

}  // namespace
}  // namespace ddprun::supervisor
