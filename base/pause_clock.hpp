// Time in which a job could not run does not count toward its limits: not
// toward the launcher's hang limits and file timers, not toward the DDP
// core's collective timeouts. Two kinds of pause: this process itself did
// not run (SIGSTOP or Ctrl-Z of the whole job, Slurm's `scontrol suspend`, a
// cgroup freezer, a host starved of CPU), seen as a look that comes much
// later than the watcher's tick; and, for the launcher, a worker stopped
// (SIGSTOP, a debugger at a breakpoint), whose peers then wait for it in
// their collectives: the job is paused for as long as one is. Pure: tests
// drive it with made-up times.
#pragma once

#include <chrono>

namespace ddprun {

struct PauseLook {
  std::chrono::steady_clock::duration discounted{0};  // not to count: add it to every deadline
  bool self_gap = false;                              // this process itself did not run meanwhile
};

class PauseClock {
 public:
  using Time = std::chrono::steady_clock::time_point;
  // A watcher looks at least this often while a limit is armed.
  static constexpr std::chrono::milliseconds kTick{500};
  // A look this much later than the tick's: this process did not run meanwhile.
  static constexpr std::chrono::milliseconds kLate{1000};

  // Watching starts (again) at `now`: nothing paused.
  void Start(Time now) {
    last_ = now;
    stopped_ = false;
  }
  // A look at `now`; `worker_stopped`: some running worker is stopped now.
  // The time since the last look is discounted when this process did not run
  // for it, or when a worker was stopped at either look.
  PauseLook Look(Time now, bool worker_stopped = false);
  // The watcher was busy on purpose until `now` (a debug dump on request):
  // its caller leaves that time out itself; the next look counts from `now`.
  void Skip(Time now) { last_ = now; }

 private:
  Time last_{};
  bool stopped_ = false;
};

}  // namespace ddprun
