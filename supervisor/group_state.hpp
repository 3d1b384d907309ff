// The supervision state machine of one worker group (one attempt on a node).
//
// It decides, and the event loop (supervisor/supervisor.hpp) or a test fake
// carries out: events come in (child exits, signals to the launcher, timer
// expiries); actions go out through ProcessControl (signal a worker's process
// group) and Timer (arm the one deadline this machine needs at a time).
//
// Lifecycle: Running -> (first failure or terminating signal) Stopping: every
// surviving worker's group gets SIGTERM (or the received signal) and the
// grace period starts -> Killing: SIGKILL, and a bounded wait for the kernel
// to reap -> Done. Workers that do not die even then (D state) are abandoned
// and named, so the launcher never blocks forever.
//
// Not thread-safe: drive it from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "supervisor/exit_status.hpp"

namespace ddprun::supervisor {

using Duration = std::chrono::duration<double>;
using WallTime = std::chrono::system_clock::time_point;

// Signals a worker's process group; the OS seam of this state machine.
class ProcessControl {
 public:
  virtual ~ProcessControl() = default;
  virtual void SignalGroup(pid_t pgid, int sig) = 0;
  // env::StoppedState of the process: 'T' stopped by a signal, 't' by a
  // tracer, 0 running (or unknown).
  virtual char StoppedState(pid_t) { return 0; }
};

// One deadline at a time; Arm() replaces the previous one.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void Arm(Duration after) = 0;
  virtual void Cancel() = 0;
};

// A signal a scheduler or a terminal sends every process of a job at once
// (SIGTERM, SIGINT, SIGHUP, SIGQUIT): a worker that died of one may have
// been stopped with the job, the launcher's own copy a moment behind.
bool IsJobSignal(int sig);

enum class WorkerState { kRunning, kSucceeded, kFailed, kStopped, kAbandoned };

struct WorkerRecord {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  WorkerState state = WorkerState::kRunning;
  ExitStatus exit;
  WallTime exit_time;
  std::string start_error;    // why it could not be started, if it could not
  std::string hang;           // why it was declared hung ("" when it was not)
  bool hang_at_exit = false;  // hung after removing its heartbeat file: its program had finished
  // Seconds since it removed its heartbeat file (finishing) when it crashed
  // (ExitStatus::Crashed); -1 when it had not, or did not crash.
  double crashed_finished_for = -1;
  std::string timer;             // why its file timer expired and it was signalled ("" when not)
  std::string output_tail;       // its last output lines (at most ~4 KiB)
  bool tail_has_stdout = false;  // output_tail has its stdout lines too, not stderr's alone
  bool stderr_seen = false;      // all it wrote on stderr was read (a pipe, its log): "" is nothing
  std::vector<std::string> lost_logs;  // each incomplete log file (a failed write): which, why
  // Counted as a failure only after the stop, having failed on its own
  // (CountOwnFailures): listed, never the root cause.
  bool failed_while_stopping = false;
  // Found stopped (SIGSTOP, a tracer: env::StoppedState) as the group began
  // to stop: it held its peers' collectives meanwhile.
  char stopped_at_stop = 0;
};

enum class Phase { kRunning, kStopping, kKilling, kDone };
enum class Outcome { kRunning, kSucceeded, kFailed, kInterrupted, kStopped };

// A worker the launcher found hung: by index into GroupState::workers().
struct HungWorker {
  size_t index = 0;
  std::string why;
  bool at_exit = false;  // it had removed its heartbeat file (finishing) and did not exit
};

struct GroupOptions {
  Duration shutdown_timeout{30.0};    // SIGTERM -> SIGKILL
  Duration kill_timeout{10.0};        // SIGKILL -> give up on a process
  std::set<int> forward_only;         // signals passed on without teardown (SIGUSR1/2)
  Duration hang_timeout{0};           // silence after a first beat that is a hang (0: off)
  Duration startup_timeout{0};        // time for the first beat (0: off)
  Duration exit_timeout{0};           // time to exit after removing the heartbeat file (0: none)
  bool progress_from_output = false;  // any output line is a beat (--hang_detect=output)
};

class GroupState {
 public:
  GroupState(GroupOptions options, ProcessControl* control, Timer* timer);

  // REQUIRES: called before any event, once per started worker.
  void AddWorker(int local_rank, int rank, pid_t pid);

  // Child exits reaped together; every failure among them counts as observed
  // before the teardown they cause. Unknown pids are ignored.
  void OnExits(const std::vector<std::pair<pid_t, ExitStatus>>& exits, WallTime now);
  // A worker that could not be started: counts as a failure of that rank.
  // Worker `index` crashed `finished_for` after it had removed its heartbeat
  // file (HeartbeatWatch::Finished): its program had finished. Kept for the
  // failure's report; the failure itself is OnExits'.
  void NoteCrashedFinishing(size_t index, Duration finished_for);
  void OnStartFailure(int local_rank, int rank, ExitStatus as_exit, WallTime now, std::string why);
  // A signal the launcher received and handles: the first terminating one
  // stops the group (SIGTERM/SIGINT/... to every worker, the grace, SIGKILL);
  // more of them change nothing, but a SIGINT while stopping (Ctrl-C twice,
  // or once during a stop for a failure) skips the grace; a SIGINT within
  // kOnePress of the first is that Ctrl-C delivered twice (the terminal and a
  // wrapper such as `timeout --foreground` both pass it on), not a second one.
  // Workers that died of that same signal before the launcher saw it count as
  // stopped, not failed. Also after the group is done (their exits may be
  // read first). A group whose failures are all such deaths (SIGTERM, SIGINT,
  // SIGHUP, SIGQUIT: what a scheduler or a terminal sends every process) is
  // done only kJobSignalSettle after its last exit, so that the launcher's
  // own copy, a moment behind, is seen before a restart (attack 87).
  static constexpr std::chrono::milliseconds kOnePress{150};
  static constexpr std::chrono::milliseconds kJobSignalSettle{1000};
  void OnSignal(int sig, WallTime now);
  // Workers the launcher found hung at `found` (before the dump): failures
  // like a crash, dated `found`, then the usual teardown. A worker that
  // failed while the dump was written failed after the hang: the group is
  // then already stopping, and the hung ones are still declared, before it.
  // False (nothing done) when none of them runs any more (each exited during
  // the dump, and its exit decides), or the group stopped for another reason.
  bool OnHang(const std::vector<HungWorker>& hung, WallTime found);
  // Worker `index` had its file timer (supervisor/file_timer.hpp) expire
  // and was signalled: a failure like a crash, then the usual teardown. Its
  // exit, when it comes, is that failure's, not another.
  void OnTimerExpired(size_t index, std::string why, WallTime now);
  // The launcher stops the group for a reason of its own (the rendezvous
  // round ended elsewhere): SIGTERM, grace, SIGKILL; the outcome is kStopped.
  void OnStopRequest();
  void OnTimer();

  Phase phase() const { return phase_; }
  bool done() const { return phase_ == Phase::kDone; }
  Outcome outcome() const;
  int received_signal() const { return received_signal_; }
  const std::vector<WorkerRecord>& workers() const { return workers_; }
  std::vector<pid_t> pids() const;
  // Failures in the order observed (indices into workers()).
  const std::vector<size_t>& failures() const { return failures_; }
  // Every signal ddprun sent the workers (to stop them, or forwarded).
  const std::set<int>& signals_sent() const { return signals_sent_; }

 private:
  void BeginStop(int sig);
  void ExcuseDeathsBy(int sig);
  void SignalSurvivors(int sig);
  bool AnyRunning() const;
  void FinishIfAllExited();
  bool DiedOfJobSignalsOnly() const;
  bool Declare(size_t index, std::string WorkerRecord::*field, std::string why, WallTime now);

  GroupOptions options_;
  ProcessControl* control_;
  Timer* timer_;
  std::vector<WorkerRecord> workers_;
  std::vector<size_t> failures_;
  Phase phase_ = Phase::kRunning;
  int received_signal_ = 0;
  bool stop_requested_ = false;
  std::set<int> signals_sent_;
  bool settling_ = false;       // every worker exited: waiting kJobSignalSettle
  bool settled_ = false;        // that wait is over
  int interrupts_ = 0;          // SIGINTs received: Ctrl-C while stopping skips the grace
  WallTime first_interrupt_{};  // when the first came
};

}  // namespace ddprun::supervisor
