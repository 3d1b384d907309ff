// Time in which the job could not run does not count toward its hang limits
// or its file timers. Two kinds of pause: the launcher itself did not run
// (SIGSTOP or Ctrl-Z of the whole job, Slurm's `scontrol suspend`, a cgroup
// freezer, a host starved of CPU), seen as a look that comes much later than
// the supervisor's tick; and a worker stopped (SIGSTOP, a debugger at a
// breakpoint), whose peers then wait for it in their collectives: the job
// is paused for as long as one is. Pure: tests drive it with made-up times.
#pragma once

#include <chrono>

#include "supervisor/hang_check.hpp"

namespace ddprun::supervisor {

struct PauseLook {
  SteadyTime::duration discounted{0};  // not to count: add it to every deadline
  bool launcher_gap = false;           // the launcher itself did not run meanwhile
};

class PauseClock {
 public:
  // The supervisor looks at least this often while a limit is armed.
  static constexpr std::chrono::milliseconds kTick{500};
  // A look this much later than the tick's: the launcher did not run meanwhile.
  static constexpr std::chrono::milliseconds kLate{1000};

  // A new group starts at `now`: nothing paused.
  void Start(SteadyTime now) {
    last_ = now;
    stopped_ = false;
  }
  // A look at `now`; `worker_stopped`: some running worker is stopped now.
  // The time since the last look is discounted when the launcher did not run
  // for it, or when a worker was stopped at either look.
  PauseLook Look(SteadyTime now, bool worker_stopped);
  // The launcher was busy on purpose until `now` (a debug dump on request):
  // its caller leaves that time out itself; the next look counts from `now`.
  void Skip(SteadyTime now) { last_ = now; }

 private:
  SteadyTime last_{};
  bool stopped_ = false;
};

}  // namespace ddprun::supervisor
