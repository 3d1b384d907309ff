// The event loop that runs worker groups: one libuv loop on the launcher's
// main thread where child exits (SIGCHLD), output pipes, the teardown timer
// and the signals the launcher handles are all events. No polling interval
// decides how fast a failure is noticed.
//
// One Supervisor lives for the whole launcher run, so handled signals are
// caught between attempts too. Not thread-safe; use from one thread.
#pragma once

#include <uv.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "base/held_worker.hpp"
#include "base/pause_clock.hpp"
#include "base/status.hpp"
#include "base/unique_fd.hpp"
#include "supervisor/containment.hpp"
#include "supervisor/file_timer_server.hpp"
#include "supervisor/group_state.hpp"
#include "supervisor/hang_check.hpp"
#include "supervisor/heartbeat_watch.hpp"
#include "supervisor/shown_stream.hpp"
#include "supervisor/signal_tap.hpp"
#include "supervisor/spawn.hpp"
#include "supervisor/worker_spec.hpp"

namespace ddprun::supervisor {

class ConsoleWriter;

struct GroupResult {
  Outcome outcome = Outcome::kSucceeded;
  int received_signal = 0;
  std::vector<WorkerRecord> workers;
  std::vector<size_t> failures;  // indices into workers, in observed order
  std::set<int> signals_sent;    // what ddprun sent the workers (GroupState::signals_sent)
  // The other nodes' workers that held the job (Supervisor::PeerPauses) at
  // the last look while the group ran.
  std::vector<HeldWorker> held_elsewhere;
};

// A worker that holds the job, for the log: "rank 3 (local_rank 1, pid 4242)
// on node 1 (host-b) is stopped by a signal (SIGSTOP)"; `past`: "rank 3 on
// node 1 (host-b) was stopped by a signal (SIGSTOP)"; `who_only`: the first
// part, to "(host-b)".
std::string DescribeHeld(const HeldWorker& w, bool past = false, bool who_only = false);

// Terminating signals that any Supervisor of this process received and acted
// on (not SIGUSR1/2): the launcher was told to stop.
int TerminatingSignalsReceived();

class Supervisor {
  struct Key {
    explicit Key() = default;
  };

 public:
  explicit Supervisor(Key);  // use Create()
  // Installs handlers for `handled_signals`; SIGPIPE is ignored from now on.
  // Workers and all they start are contained (supervisor/containment.hpp),
  // in a cgroup of the job's own when `try_cgroup` and one can be made.
  static StatusOr<std::unique_ptr<Supervisor>> Create(const std::set<int>& handled_signals,
                                                      bool try_cgroup);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the workers and supervises them until every one has exited (or
  // was abandoned after SIGKILL) and their output is drained.
  GroupResult RunGroup(const std::vector<WorkerSpec>& specs, const GroupOptions& options);

  // The handled signals that are passed on to the workers without a
  // teardown (SIGUSR1, SIGUSR2): the agent's GroupOptions::forward_only.
  const std::set<int>& forward_only() const { return forward_only_; }
  // A terminating signal received while no group ran, or 0.
  int pending_signal() const { return pending_signal_; }
  // Terminating signals received so far (every one, not only the first), and
  // the last of them: whether one came after a moment.
  int signals_received() const { return signals_received_; }
  int last_signal() const { return last_signal_; }
  // Between groups: handles the signals that arrived since the last call (the
  // loop runs only inside RunGroup otherwise), so pending_signal() is current.
  void PollSignals();

  // Called on the loop thread when workers are found hung, before they are
  // stopped: the place for a debug dump (it may take a few seconds). Returns
  // the ranks it found to be the cause (stragglers), reported first.
  using HangHandler = std::function<std::vector<int>(const HangReport&)>;
  void SetHangHandler(HangHandler handler) { hang_handler_ = std::move(handler); }
  // Called once per group, when every worker was started (or failed to start).
  using StartHandler = std::function<void(const std::vector<WorkerRecord>&)>;
  void SetStartHandler(StartHandler handler) { start_handler_ = std::move(handler); }
  // Called on the loop thread at each look of the pause watch (twice a second
  // while a hang limit is armed) with the group's workers. Must not block.
  void SetLookHandler(StartHandler handler) { look_handler_ = std::move(handler); }
  // Called on the loop thread when a worker's own exit (or its failure to
  // start) fails the group, as the others begin to be stopped (before their
  // grace): the group so far, its failures in observed order. Must not block.
  using FailureHandler = std::function<void(const GroupResult&)>;
  void SetFailureHandler(FailureHandler handler) { failure_handler_ = std::move(handler); }
  // Returns true for a forward-only signal (GroupOptions::forward_only) that
  // its sender already delivered to the workers (e.g. Slurm signalling every
  // process of a step): it is not passed on again. `sender` is the sending
  // pid (0 when unknown); SIGUSR1/SIGUSR2 only.
  using SignalFilter = std::function<bool(int sig, pid_t sender)>;
  void SetSignalFilter(SignalFilter filter) { signal_filter_ = std::move(filter); }
  // Handles `dump_signal` (ddprun dump): the handler gets every running
  // worker; nothing is stopped.
  void SetDumpHandler(int dump_signal, HangHandler handler);
  // A job of several nodes (rendezvous/pause_board.hpp): `held_here` is told
  // when this node's worker that holds the job changes (stopped, or waiting
  // for the console, from the first look that finds it), state 0 once none
  // does; `held_elsewhere` gives the other nodes' ones, whose time is left out
  // of the hang limits and file timers as this node's own is. Both on the
  // loop thread, neither may block. Set before RunGroup; {} for none.
  struct PeerPauses {
    std::function<void(const HeldWorker&)> held_here;
    std::function<std::vector<HeldWorker>()> held_elsewhere;
  };
  void SetPeerPauses(PeerPauses peers) { peers_ = std::move(peers); }

  // Serves torch's file timer (TORCHELASTIC_ENABLE_FILE_TIMER) on a named
  // pipe made at `path`, removed when the supervisor goes. An expired timer's
  // pid, when it is a running worker or a descendant of one, gets the
  // timer's signal and that worker fails (the root cause, with the scope and
  // how long it was held); other pids are left alone. Timers are dropped at
  // each group's start and end. Fails when the pipe cannot be made.
  Status EnableFileTimer(const std::string& path);

  // Signals the workers start with ignored (ignored when the launcher started,
  // and not handled by it); every other one starts at its default.
  void SetWorkersIgnore(const std::set<int>& signals);

  // How the workers' process trees are contained, for the log.
  std::string DescribeContainment() const { return containment_->Describe(); }
  // "DDPRUN_PROCESS_TREE=<token>": a process given it dies with the job, also
  // when the launcher is killed (the guardian's sweep).
  const std::string& ContainmentMark() const { return containment_->env_entry(); }
  // Whether the workers are in a cgroup of the job's own.
  bool OwnCgroup() const { return !containment_->cgroup_dir().empty(); }

  // Thread-safe: stops the running group (outcome kStopped), or the next one
  // to start, until ClearStopRequest().
  void RequestStop();
  void ClearStopRequest();

 private:
  struct PipeReader;
  class LoopTimer;

  void StartWorker(const WorkerSpec& spec, GroupState& state);
  void NotifyFailure(const GroupState& state);  // calls failure_handler_, if set
  StatusOr<int> ChildFd(const StreamSpec& stream, int console_fd,
                        std::vector<UniqueFd>& parent_side);
  // The one stream a worker's stdout and stderr can share (one pipe, their
  // order kept): both shown alike on the launcher's stdout and stderr, which
  // are one file (2>&1, a Slurm output file), written nowhere else, and one
  // read through a pipe. nullopt otherwise.
  std::optional<StreamSpec> OneStream(const StreamSpec& out, const StreamSpec& err);
  StatusOr<int> FilterFd(const std::string& path);
  void ReapChildren();
  // Of `exits`, read while the group ran, the workers that crashed at exit
  // (HeartbeatWatch::Finished), by index, with how long before they finished.
  std::vector<std::pair<size_t, Duration>> CrashedFinishing(
      const std::vector<std::pair<pid_t, ExitStatus>>& exits) const;
  void OnSignal(int sig, pid_t sender = 0);
  void Drain(GroupState& state);
  // What a worker's output left for its failure report.
  struct WorkerOutput {
    std::string
        tail;  // the last lines the worker wrote on the streams read through pipes (bounded)
    bool tail_has_stdout = false;        // its stdout was read too (else stderr's alone)
    bool stderr_seen = false;            // its stderr was read through a pipe
    std::vector<std::string> lost_logs;  // each incomplete log file: which and why
  };
  void NoteLine(size_t worker, std::string_view line);
  // A log file `path` that could not be written; `instead` says where its
  // later output goes ("its later output is only on the console"). Said and
  // counted once for a file several workers write (the filtered file).
  void NoteLogLost(size_t worker, const std::string& path, int err, const char* instead);
  std::set<std::string> lost_log_paths_;  // this group's, each noted once
  std::set<int> forwarded_said_;          // SIGUSR1/2 passed on and said so, once each
  // Hang detection: one timer, armed for the earliest deadline of any worker.
  void ArmHangCheck();
  void CheckHangs();
  std::vector<Beat> Beats() const;  // hang_check.hpp's view of the running workers
  HangLimits Limits() const;
  // Pauses (pauses.cpp): time the job could not run does not count toward
  // its hang limits and file timers. A tick while one is armed.
  void StartPauseWatch();
  void StopPauseWatch();
  void CatchUpPauses();
  // Leaves `paused` out of the hang limits and file timers.
  void LeaveOut(SteadyTime::duration paused, SteadyTime now);
  void DumpOnRequest();  // the dump signal's handler
  // Ctrl-Z while a group runs: the workers stop and continue with ddprun; a
  // terminal's resize (SIGWINCH) reaches them too.
  void StartJobControl();
  void StopJobControl();
  void StopTogether();
  void CloseReader(PipeReader& reader);
  // Output that only the console keeps (pipe_reader.cpp): a reader held
  // while the console does not read resumes when it has room again.
  void WatchConsoleRoom();
  void UnwatchConsoleRoom();
  // A worker that waits for the console now (console_wait.cpp): its output
  // held by ddprun, or a thread of it blocked writing to ddprun's own stdout
  // or stderr (inherited). Tells the user when one has waited a while, and
  // when the console reads again (and whether the hang limits count again:
  // not while `held_otherwise`, a worker stopped here or anything elsewhere);
  // returns whether one waits.
  bool LookForConsoleWait(SteadyTime now, bool held_otherwise);
  struct ConsoleBlock {
    int fd = -1;    // the console's descriptor it writes to
    pid_t pid = 0;  // the worker, or a process of its own it waits for
    pid_t tid = 0;  // the thread of `pid` that writes
  };
  std::optional<ConsoleBlock> BlockedOnConsole(pid_t pid, int depth) const;
  // How long an incomplete line (a prompt, a progress bar redrawn with '\r')
  // waits for its end before it is shown as far as it has come (one timer).
  static constexpr std::chrono::milliseconds kPartialLineWait{100};
  // Runs ShowPartialLines after `after` unless it is due already.
  void ArmPartialLines(std::chrono::milliseconds after = kPartialLineWait);
  void ShowPartialLines();
  void OnTimerExpired(const ExpiredTimer& timer);

  uv_loop_t loop_{};
  bool loop_ready_ = false;  // uv_loop_init succeeded: the destructor closes the loop
  uv_signal_t sigchld_{};
  uv_async_t stop_async_{};
  uv_async_t console_room_{};  // a console writer has room again (its thread sends it)
  std::atomic<bool> stop_requested_{false};
  std::vector<std::unique_ptr<uv_signal_t>> signals_;
  std::set<int> forward_only_;
  std::unique_ptr<SignalTap> tap_;  // the forward-only signals, with their sender
  SignalFilter signal_filter_;
  std::unique_ptr<LoopTimer> timer_;
  PosixProcessControl control_;
  std::unique_ptr<Containment> containment_;
  GroupState* running_ = nullptr;
  int pending_signal_ = 0;
  int signals_received_ = 0;
  int last_signal_ = 0;
  sigset_t workers_ignore_{};  // SetWorkersIgnore
  UniqueFd dev_null_in_;
  UniqueFd dev_null_out_;
  bool stdout_is_stderr_ = false;  // the launcher's fds 1 and 2 are one file (dev, inode)
  std::map<const ConsoleWriter*, ConsoleTurn> turns_;  // outlives the readers sharing each
  std::vector<std::unique_ptr<PipeReader>> readers_;
  uv_timer_t partial_timer_{};
  std::map<std::string, UniqueFd> filter_files_;
  uv_timer_t hang_timer_{};
  uv_timer_t pause_timer_{};
  PauseClock pauses_;
  bool pause_watch_armed_ = false;
  pid_t stopped_pid_ = 0;            // a worker stopped at the last look
  pid_t told_pid_ = 0;               // the stopped worker the user was told of
  bool console_waiting_ = false;     // a worker waited for the console at the last look ...
  SteadyTime console_wait_since_{};  // ... since then
  bool console_told_ = false;        // ... and the user was told
  HeldWorker console_held_;          // ... which worker, once told
  PeerPauses peers_;
  HeldWorker held_told_;  // as last given to peers_.held_here
  struct HeldSince {
    HeldWorker worker;
    SteadyTime since;
  };
  std::vector<HeldSince> held_elsewhere_;  // as peers_.held_elsewhere last gave it, each since
  std::vector<HeldWorker> HeldElsewhere() const {
    std::vector<HeldWorker> held;
    for (const HeldSince& h : held_elsewhere_) held.push_back(h.worker);
    return held;
  }
  // Tells peers_ of this node's held worker, and the user of the others'.
  void LookAcrossNodes(const HeldWorker& here, const std::vector<HeldWorker>& elsewhere,
                       SteadyTime now);
  struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
    bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
  };
  std::vector<FileId> console_files_;  // ddprun's stdout and stderr, as Create found them
  SteadyTime paused_since_{};
  uv_signal_t tstp_{};
  bool tstp_ready_ = false;  // SIGTSTP is job control, not a --signals_to_handle one
  uv_signal_t winch_{};
  bool winch_ready_ = false;           // SIGWINCH is passed on, not a --signals_to_handle one
  HeartbeatWatch heartbeats_;          // the running group's workers, by index
  std::vector<WorkerOutput> outputs_;  // the same
  GroupOptions options_;
  HangHandler hang_handler_;
  HangHandler dump_handler_;
  StartHandler start_handler_;
  StartHandler look_handler_;
  FailureHandler failure_handler_;
  uv_signal_t dump_signal_{};
  bool dump_signal_started_ = false;
  std::unique_ptr<FileTimerServer> file_timer_;
  // The workers still running, as a report with nobody hung.
  HangReport RunningReport();
};

}  // namespace ddprun::supervisor
