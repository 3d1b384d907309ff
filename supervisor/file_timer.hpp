// The torchelastic file timer, apart from its pipe and the event loop: the
// requests torch's FileTimerClient writes, and the table of armed timers
// (torch/distributed/elastic/timer/file_based_local_timer.py, FileTimerServer).
// Pure, so tests drive it with made-up times.
//
// The protocol: a client opens the named pipe O_WRONLY|O_NONBLOCK, writes one
// JSON object and a newline (at most PIPE_BUF bytes, so writes of several
// clients never interleave), and closes it:
//   {"version": 1, "pid": 123, "scope_id": "train.py#42",
//    "expiration_time": 1700000000.5, "signal": 9}
// expiration_time is wall-clock seconds (Python's time.time()); a negative
// one releases the timer (torch sends -1 with signal 0). Timers are keyed by
// (pid, scope_id): acquiring again replaces one.
//
// Not thread-safe.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.hpp"
#include "supervisor/group_state.hpp"

namespace ddprun::supervisor {

// torch's clients refuse longer requests (select.PIPE_BUF on Linux).
inline constexpr size_t kMaxTimerRequest = 4096;

struct TimerRequest {
  pid_t pid = 0;
  std::string scope;
  std::optional<WallTime> expires;  // nullopt: release
  int signal = 0;                   // sent on expiry; <= 0: none (torch does not reap)
};

// One request line, without or with its newline. Fails (kInvalidArgument,
// naming the field) on anything but an object with an integer pid > 0, a
// string scope_id, a numeric expiration_time and an integer signal below 65.
StatusOr<TimerRequest> ParseTimerRequest(std::string_view line);

struct ExpiredTimer {
  pid_t pid = 0;
  std::string scope;
  int signal = 0;  // the signal to send; <= 0: the client asked for none
  Duration held;   // from the request's arrival to the expiry seen
  Duration limit;  // from the request's arrival to its expiration time
};

class TimerTable {
 public:
  // Applies a request that arrived at `now`.
  void Apply(const TimerRequest& request, WallTime now);
  // The timers expired at `now`, one per pid: as torch, the earliest expired
  // one that has a signal, else the earliest. Every timer of those pids is
  // dropped (torch clears a reaped pid's timers).
  std::vector<ExpiredTimer> TakeExpired(WallTime now);
  // Time that does not count (base/pause_clock.hpp): every timer expires `by`
  // later, and its reported hold leaves it out.
  void Postpone(Duration by);
  // The earliest expiration time of any timer; nullopt when none is armed.
  std::optional<WallTime> NextExpiry() const;
  void Clear() { timers_.clear(); }
  size_t size() const { return timers_.size(); }

 private:
  struct Armed {
    WallTime expires;
    WallTime arrived;
    int signal = 0;
  };
  std::map<std::pair<pid_t, std::string>, Armed> timers_;
};

// Cuts the bytes read from the pipe into request lines. A line longer than
// kMaxTimerRequest (no client of torch's writes one) is dropped up to its
// newline and reported once through `too_long`; never kept whole.
class RequestLines {
 public:
  using LineFn = std::function<void(std::string_view line)>;  // without its '\n'
  void Feed(std::string_view data, const LineFn& line, const std::function<void()>& too_long);

 private:
  std::string partial_;
  bool skipping_ = false;  // inside an overlong line
};

// The index in `worker_pids` of the worker that is `pid` or one of its
// ancestors, following `parent_of` (0 or the pid itself: no parent); nullopt
// when `pid` is none of the workers' processes. A worker's pid is never
// reused while the group runs (its exit is read without reaping).
std::optional<size_t> OwningWorker(pid_t pid, const std::vector<pid_t>& worker_pids,
                                   const std::function<pid_t(pid_t)>& parent_of);

// The parent pid from /proc/<pid>/stat; 0 when the process is gone.
pid_t ParentPid(pid_t pid);

}  // namespace ddprun::supervisor
