// The hang decision, apart from the event loop, the clock and the heartbeat
// files: given when each worker last made progress and the time now, which
// running workers are hung, and when to look next. Pure, so tests drive it
// with made-up times.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/group_state.hpp"
#include "supervisor/worker_spec.hpp"

namespace ddprun::supervisor {

using SteadyTime = std::chrono::steady_clock::time_point;

// One worker's progress as the supervisor saw it.
struct Beat {
  bool running = false;
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  SteadyTime last;         // the last beat, or the start, or when it was seen finishing ...
  SteadyTime seen;         // ... and when that was: `last` is moved later by pauses
  bool beaten = false;     // beat at least once
  bool finishing = false;  // removed its heartbeat file: no beat is due, only its exit
  // Why its heartbeat file cannot be written ("" when it can): then it cannot
  // beat (a log directory made read-only or immutable), and is never found
  // hung for its silence (HeartbeatWatch says so).
  std::string cannot_beat;
};

struct HangLimits {
  Duration hang_timeout{0};     // silence after a first beat (0: off)
  Duration startup_timeout{0};  // time for the first beat (0: off)
  Duration exit_timeout{0};     // time to exit once finishing (0: none)
};

struct HangVerdict {
  HangReport report;             // running, hung and still-beating workers
  std::vector<HungWorker> hung;  // by index into beats
};

// Ranks stuck at the same moment beat within a few file-time ticks of each
// other: once one is past its limit, one silent for nine tenths of it (at most
// half a second less) is stuck too, not "still beating".
HangVerdict FindHung(const std::vector<Beat>& beats, const HangLimits& limits, SteadyTime now);

// The earliest moment some worker could be hung; nullopt when none can (no
// limits, or nothing running). A worker without a first beat and without a
// startup limit is looked at again one hang timeout from `now`; with an exit
// limit, a worker not yet seen finishing is looked at again within a quarter of it
// (its heartbeat file may be gone by then).
std::optional<SteadyTime> NextHangCheck(const std::vector<Beat>& beats, const HangLimits& limits,
                                        SteadyTime now);

}  // namespace ddprun::supervisor
