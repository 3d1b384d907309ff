#include "supervisor/supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "base/exit_codes.hpp"
#include "env/names.hpp"
#include "supervisor/console.hpp"
#include "supervisor/hang_check.hpp"
#include "supervisor/late_signals.hpp"
#include "supervisor/pipe_reader.hpp"
#include "supervisor/uv_globals.hpp"

namespace ddprun::supervisor {

namespace {

// After the last worker exited, how long output still held open by its
// leftover children may take to drain before the pipes are closed.
constexpr uint64_t kDrainMillis = 2000;

uint64_t ToMillis(Duration d) {
  const double ms = d.count() * 1000.0;
  return ms <= 0 ? 0 : static_cast<uint64_t>(std::llround(ms));
}

// Closes a handle its init reached (a failed Create leaves some untouched).
void CloseIfOpen(void* handle) {
  auto* h = static_cast<uv_handle_t*>(handle);
  if (h->type != UV_UNKNOWN_HANDLE && !uv_is_closing(h)) uv_close(h, nullptr);
}

std::atomic<int> terminating_signals{0};  // TerminatingSignalsReceived()

}  // namespace

int TerminatingSignalsReceived() { return terminating_signals.load(); }

// Adapts the group's one deadline to a libuv timer; `before` runs first at
// each expiry (reading exits the loop has not seen yet).
class Supervisor::LoopTimer : public Timer {
 public:
  LoopTimer(uv_loop_t* loop, std::function<void()> before) : before_(std::move(before)) {
    uv_timer_init(loop, &timer_);
    timer_.data = this;
  }
  void Arm(Duration after) override {
    uv_update_time(timer_.loop);  // the callback arming it may have run long (a hang dump)
    uv_timer_start(
        &timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<LoopTimer*>(t->data);
          self->before_();
          if (self->target_ != nullptr) self->target_->OnTimer();
        },
        ToMillis(after), 0);
  }
  void Cancel() override { uv_timer_stop(&timer_); }
  void Target(GroupState* state) { target_ = state; }
  uv_timer_t* handle() { return &timer_; }

 private:
  uv_timer_t timer_{};
  std::function<void()> before_;
  GroupState* target_ = nullptr;
};

Supervisor::Supervisor(Key) { sigemptyset(&workers_ignore_); }

void Supervisor::SetWorkersIgnore(const std::set<int>& signals) {
  sigemptyset(&workers_ignore_);
  for (int sig : signals) sigaddset(&workers_ignore_, sig);
}

StatusOr<std::unique_ptr<Supervisor>> Supervisor::Create(const std::set<int>& handled_signals,
                                                         bool try_cgroup) {
  if (Status s = PrepareUvGlobals(); !s.ok()) return s;
  auto s = std::make_unique<Supervisor>(Key{});
  auto containment = Containment::Create(try_cgroup);
  if (!containment.ok()) return containment.status();
  s->containment_ = std::move(*containment);
  if (int rc = uv_loop_init(&s->loop_); rc != 0) return ErrnoStatus("uv_loop_init", -rc);
  s->loop_ready_ = true;
  s->loop_.data = s.get();
  signal(SIGPIPE, SIG_IGN);
  if (int rc = uv_signal_init(&s->loop_, &s->sigchld_); rc != 0) {
    return ErrnoStatus("uv_signal_init", -rc);
  }
  s->sigchld_.data = s.get();
  uv_signal_start(
      &s->sigchld_, [](uv_signal_t* h, int) { static_cast<Supervisor*>(h->data)->ReapChildren(); },
      SIGCHLD);
  int async_rc = uv_async_init(&s->loop_, &s->stop_async_, [](uv_async_t* a) {
    auto* self = static_cast<Supervisor*>(a->data);
    if (self->running_ == nullptr || !self->stop_requested_) return;
    // Exits that happened before the request are theirs, not the stop's (an
    // agent stopped for a while comes back to workers that finished meanwhile).
    self->ReapChildren();
    self->running_->OnStopRequest();
  });
  if (async_rc != 0) return ErrnoStatus("uv_async_init", -async_rc);
  s->stop_async_.data = s.get();
  s->WatchConsoleRoom();
  // SIGUSR1/SIGUSR2 through the tap: passing them on may depend on their sender.
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (handled_signals.count(sig) != 0) s->forward_only_.insert(sig);
  }
  auto tap = SignalTap::Start(&s->loop_, s->forward_only_, [self = s.get()](int sig, pid_t sender) {
    self->OnSignal(sig, sender);
  });
  if (!tap.ok()) return tap.status();
  s->tap_ = std::move(*tap);
  for (int sig : handled_signals) {
    if (s->forward_only_.count(sig) != 0) continue;
    s->signals_.push_back(std::make_unique<uv_signal_t>());
    uv_signal_t* h = s->signals_.back().get();
    uv_signal_init(&s->loop_, h);  // the loop's signal pipe is open: cannot fail
    h->data = s.get();
    int rc = uv_signal_start(
        h,
        [](uv_signal_t* sh, int signum) { static_cast<Supervisor*>(sh->data)->OnSignal(signum); },
        sig);
    if (rc != 0) {
      return InvalidArgument("--signals_to_handle: cannot handle signal " + std::to_string(sig) +
                             ": " + uv_strerror(rc));
    }
    if (int keep = KeepCaught(sig); keep != 0) {
      return ErrnoStatus("keep signal " + std::to_string(sig) + " caught at exit", -keep);
    }
    CountDeliveries(sig);
  }
  // libuv runs timers before it reads SIGCHLD: exits that came while the launcher was stopped
  // (SIGSTOP, a starved host) are read before a deadline acts on the workers.
  s->timer_ = std::make_unique<LoopTimer>(&s->loop_, [sup = s.get()] { sup->ReapChildren(); });
  uv_timer_init(&s->loop_, &s->hang_timer_);
  s->hang_timer_.data = s.get();
  uv_timer_init(&s->loop_, &s->partial_timer_);
  s->partial_timer_.data = s.get();
  uv_timer_init(&s->loop_, &s->pause_timer_);
  s->pause_timer_.data = s.get();
  if (handled_signals.count(SIGTSTP) == 0) {
    uv_signal_init(&s->loop_, &s->tstp_);
    s->tstp_.data = s.get();
    s->tstp_ready_ = true;
  }
  if (handled_signals.count(SIGWINCH) == 0) {
    uv_signal_init(&s->loop_, &s->winch_);
    s->winch_.data = s.get();
    s->winch_ready_ = true;
  }
  struct stat out {
  }, err{};
  s->stdout_is_stderr_ = fstat(STDOUT_FILENO, &out) == 0 && fstat(STDERR_FILENO, &err) == 0 &&
                         out.st_dev == err.st_dev && out.st_ino == err.st_ino;
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat st {};
    if (fstat(fd, &st) == 0) s->console_files_.push_back({st.st_dev, st.st_ino});
  }
  s->dev_null_in_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  s->dev_null_out_ = UniqueFd(open("/dev/null", O_WRONLY | O_CLOEXEC));
  if (!s->dev_null_in_.valid() || !s->dev_null_out_.valid()) {
    return ErrnoStatus("open /dev/null", errno);
  }
  return s;
}

Supervisor::~Supervisor() {
  for (auto& h : signals_) CatchLate(h->signum, false);
  if (tap_) {
    for (int sig : tap_->signals()) CatchLate(sig, false);
  }
  if (dump_signal_started_) CatchLate(dump_signal_.signum, true);  // no workers left to dump
  if (!loop_ready_) return;
  UnwatchConsoleRoom();
  CloseIfOpen(&sigchld_);
  CloseIfOpen(&stop_async_);
  CloseIfOpen(&console_room_);
  CloseIfOpen(&hang_timer_);
  CloseIfOpen(&partial_timer_);
  CloseIfOpen(&pause_timer_);
  if (tstp_ready_) CloseIfOpen(&tstp_);
  if (winch_ready_) CloseIfOpen(&winch_);
  if (dump_signal_started_) CloseIfOpen(&dump_signal_);
  for (auto& h : signals_) CloseIfOpen(h.get());
  if (tap_) tap_->Close();
  if (timer_) CloseIfOpen(timer_->handle());
  if (file_timer_) file_timer_->Close();
  uv_run(&loop_, UV_RUN_DEFAULT);  // runs the close callbacks
  uv_loop_close(&loop_);
}

void Supervisor::RequestStop() {
  stop_requested_ = true;
  uv_async_send(&stop_async_);
}

void Supervisor::ClearStopRequest() { stop_requested_ = false; }

void Supervisor::PollSignals() {
  if (running_ == nullptr) uv_run(&loop_, UV_RUN_NOWAIT);
}

void Supervisor::OnSignal(int sig, pid_t sender) {
  if (running_ != nullptr && options_.forward_only.count(sig) != 0 && signal_filter_ &&
      signal_filter_(sig, sender)) {
    return;  // the workers have it from its sender
  }
  if (forward_only_.count(sig) == 0) {
    ++signals_received_;
    ++terminating_signals;
    last_signal_ = sig;
  } else if (running_ == nullptr || running_->done()) {
    // SIGUSR1/2 with no workers to take it (a rendezvous, a restart). Not
    // held for the next workers: they would die of it before their handler
    // is installed, and have no progress to save yet.
    spdlog::warn(
        "received {} while no workers run (between groups or before the first): no worker gets "
        "it; a checkpoint request this early finds nothing to save (under Slurm, give "
        "--signal=USR1@N an N longer than the workers' start-up)",
        SignalName(sig));
    return;
  }
  if (running_ != nullptr) {
    const bool was_done = running_->done();
    const Phase before = running_->phase();
    const bool was_running = before == Phase::kRunning;
    const int had = running_->received_signal();
    running_->OnSignal(sig, std::chrono::system_clock::now());
    if (forward_only_.count(sig) != 0 && (sig == SIGUSR1 || sig == SIGUSR2) &&
        forwarded_said_.insert(sig).second) {
      // Said once: a worker without a handler dies of it, and its report
      // should not leave the user wondering who sent it (attack 87).
      spdlog::info("received {}: passed on to every worker (--signals_to_handle); the job goes on",
                   SignalName(sig));
    }
    // A second Ctrl-C, not one job-wide SIGINT whose copy reached the workers
    // first (attack 88).
    if (sig == SIGINT && had == SIGINT && before == Phase::kStopping &&
        running_->phase() == Phase::kKilling) {
      spdlog::warn("received SIGINT again: the grace is skipped, SIGKILL to the workers left");
    }
    // Its own (or, done and draining output, its workers died of it); else it
    // ends what comes next: no restart after a failing or done group.
    const int own = running_->received_signal();
    if (was_running && own == sig && !running_->done()) {
      // Said at once: workers that take their grace (a checkpoint) would
      // otherwise leave the user with no sign the signal was heard.
      spdlog::warn(
          "received {}: stopping the workers ({} passed to each now, SIGKILL to those "
          "left after --shutdown_timeout={:g} s{})",
          SignalName(sig), SignalName(sig),
          std::chrono::duration<double>(options_.shutdown_timeout).count(),
          sig == SIGINT ? "; Ctrl-C again kills them at once" : "");
    }
    if (own == sig || (!was_done && own != 0)) return;
    if (!was_done && pending_signal_ == 0 && forward_only_.count(sig) == 0) {
      spdlog::warn(
          "received {} while the workers are being stopped: nothing is started after them; "
          "ddprun exits with {} once they are gone",
          SignalName(sig), exit_code::ForSignal(sig));
    }
  }
  if (pending_signal_ == 0 && forward_only_.count(sig) == 0) pending_signal_ = sig;
}

// Exits are read without reaping (WNOWAIT): a worker stays a zombie until
// Drain(), so its pid, which is also its process group id, cannot be reused
// while the group may still be signalled.
void Supervisor::ReapChildren() {
  // Orphans of the job that came to us and exited; the workers are read below.
  containment_->ReapAdopted(running_ != nullptr ? running_->pids() : std::vector<pid_t>{});
  if (running_ == nullptr) return;
  std::vector<std::pair<pid_t, ExitStatus>> exits;
  for (const auto& w : running_->workers()) {
    if (w.state != WorkerState::kRunning) continue;
    siginfo_t info{};
    int r;
    do {
      r = waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    } while (r < 0 && errno == EINTR);
    if (r == 0 && info.si_pid == w.pid) exits.emplace_back(w.pid, ExitStatus::FromSiginfo(info));
  }
  if (exits.empty()) return;
  const bool was_running = running_->phase() == Phase::kRunning;
  // Read before OnExits, before a look that no exited worker gets any more.
  const auto crashed_finishing =
      was_running ? CrashedFinishing(exits) : std::vector<std::pair<size_t, Duration>>{};
  running_->OnExits(exits, std::chrono::system_clock::now());
  for (const auto& [index, since] : crashed_finishing) running_->NoteCrashedFinishing(index, since);
  if (was_running && running_->phase() == Phase::kStopping && !running_->failures().empty()) {
    // Said at once, not after the others' grace: the first failure stops all.
    const WorkerRecord& w = running_->workers()[running_->failures().front()];
    spdlog::warn(
        "rank {} (local_rank {}, pid {}) failed: {}; stopping the other workers (SIGTERM now, "
        "SIGKILL to those left after --shutdown_timeout={:g} s)",
        w.rank, w.local_rank, w.pid, w.exit.Describe(),
        std::chrono::duration<double>(options_.shutdown_timeout).count());
    NotifyFailure(*running_);
  }
}

// A crash after the worker removed its heartbeat file came in its exit, its program
// finished. Only while every other worker still running has finished too: one still at work (a
// last save after its destroy_process_group) would be stopped by the failure, its program
// unfinished, and a restart is then due (attack 106). A shell's 128+N is a crash of what it ran
// (the launcher tells a shell: launcher/agent.cpp).
std::vector<std::pair<size_t, Duration>> Supervisor::CrashedFinishing(
    const std::vector<std::pair<pid_t, ExitStatus>>& exits) const {
  std::vector<std::pair<size_t, Duration>> out;
  const auto crashed = [](const ExitStatus& s) {
    return s.Crashed() || ExitStatus::Signaled(s.code - 128).Crashed();
  };
  if (std::none_of(exits.begin(), exits.end(), [&](const auto& e) { return crashed(e.second); })) {
    return out;  // the usual exits: no file read
  }
  const SteadyTime now = std::chrono::steady_clock::now();
  const int64_t wall_now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  const auto& workers = running_->workers();
  for (size_t i = 0; i < workers.size(); ++i) {
    const auto exit = std::find_if(exits.begin(), exits.end(),
                                   [&](const auto& e) { return e.first == workers[i].pid; });
    if (workers[i].state != WorkerState::kRunning) continue;
    const auto finished = heartbeats_.Finished(i, now, wall_now_ns);
    if (exit == exits.end() && !finished) return {};  // another still at work
    if (exit != exits.end() && crashed(exit->second) && finished) out.emplace_back(i, *finished);
  }
  return out;
}

void Supervisor::NotifyFailure(const GroupState& state) {
  if (failure_handler_) {
    failure_handler_(GroupResult{Outcome::kFailed, 0, state.workers(), state.failures(),
                                 state.signals_sent(), HeldElsewhere()});
  }
}

void Supervisor::StartWorker(const WorkerSpec& spec, GroupState& state) {
  // Read before the start: a worker may remove its heartbeat file (finishing)
  // before the spawn returns, and must then be seen finishing, not unbeaten.
  const int64_t beat_time = HeartbeatWatch::FileTime(spec.heartbeat_file);
  std::vector<UniqueFd> child_side;  // closed here once the child has its copies
  StatusOr<int> out = Internal("not opened");
  StatusOr<int> err = out;
  const std::optional<StreamSpec> merged = OneStream(spec.out, spec.err);
  if (merged) {
    // stdout and stderr on one file, and one of them read for its lines: one
    // pipe for both keeps their order, as the worker wrote them.
    out = ChildFd(*merged, STDOUT_FILENO, child_side);
    err = out;
  } else {
    out = ChildFd(spec.out, STDOUT_FILENO, child_side);
    err = out.ok() ? ChildFd(spec.err, STDERR_FILENO, child_side) : out;
  }
  StatusOr<pid_t> pid = Internal("not started");
  if (!out.ok() || !err.ok()) {
    pid = (out.ok() ? err : out).status();
  } else {
    std::vector<std::string> envp;
    const std::string mark = std::string(env::kProcessTree) + "=";
    for (const auto& e : spec.envp) {
      if (e.rfind(mark, 0) != 0) envp.push_back(e);  // an outer ddprun's mark is replaced
    }
    envp.push_back(containment_->env_entry());
    // The launcher's stdin when asked for and open (fd 0 may be closed).
    const bool inherit = spec.stdin_inherited && fcntl(STDIN_FILENO, F_GETFD) != -1;
    pid = SpawnWorker(SpawnRequest{spec.argv, envp, inherit ? STDIN_FILENO : dev_null_in_.get(),
                                   *out, *err, containment_->cgroup_procs_fd(), spec.cpus,
                                   &workers_ignore_});
  }
  // One entry per worker of the group, started or not: indices follow its workers.
  heartbeats_.Add(pid.ok() ? spec.heartbeat_file : "", std::chrono::steady_clock::now(), beat_time,
                  spec.out.track_progress, spec.finished_file);
  // Its stdout read too: through its own pipe, or the one it shares with
  // stderr (a stdout line is not "its last stderr line": attack 85).
  WorkerOutput& output = outputs_.emplace_back();
  output.tail_has_stdout = spec.out.NeedsPipe() || merged.has_value();
  output.stderr_seen = spec.err.NeedsPipe() || merged.has_value();
  if (pid.ok()) {
    state.AddWorker(spec.local_rank, spec.rank, *pid);
    containment_->Track(*pid);
    return;
  }
  const int code = exit_code::ForStatus(pid.status()) == exit_code::kUsage
                       ? exit_code::kFailure
                       : exit_code::ForStatus(pid.status());
  state.OnStartFailure(spec.local_rank, spec.rank, ExitStatus::Exited(code),
                       std::chrono::system_clock::now(), pid.status().message());
}

void Supervisor::Drain(GroupState& state) {
  // Children the workers left behind would hold the pipes open: workers are
  // gone, so everything they started goes too. Their process groups first
  // (the leaders are unreaped zombies, so each group id is still theirs),
  // then whatever left the groups, through the containment.
  for (const auto& w : state.workers()) {
    if (w.pid > 0 && w.state != WorkerState::kAbandoned) control_.SignalGroup(w.pid, SIGKILL);
  }
  containment_->KillAll(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::duration<double>(options_.kill_timeout.count())),
                        state.pids());
  for (const auto& w : state.workers()) {
    if (w.pid > 0 && w.state != WorkerState::kAbandoned) {
      while (waitpid(w.pid, nullptr, WNOHANG) < 0 && errno == EINTR) {
      }
    }
  }
  containment_->ReapAdopted({});
  for (auto& r : readers_) {  // nobody waits to write now: what the pipes hold is read whole
    r->draining = true;
    r->Resume();
  }
  uv_timer_t drain{};
  uv_timer_init(&loop_, &drain);
  drain.data = this;
  uv_timer_start(
      &drain,
      [](uv_timer_t* t) {
        auto* self = static_cast<Supervisor*>(t->data);
        for (auto& r : self->readers_) self->CloseReader(*r);
      },
      kDrainMillis, 0);
  auto any_open = [this] {
    for (auto& r : readers_) {
      if (!r->pipe.closed()) return true;
    }
    return false;
  };
  while (any_open()) uv_run(&loop_, UV_RUN_ONCE);
  uv_close(reinterpret_cast<uv_handle_t*>(&drain), nullptr);
  uv_run(&loop_, UV_RUN_NOWAIT);
  uv_timer_stop(&partial_timer_);
  readers_.clear();
  filter_files_.clear();
}

void Supervisor::ArmPartialLines(std::chrono::milliseconds after) {
  if (uv_is_active(reinterpret_cast<uv_handle_t*>(&partial_timer_)) != 0) return;
  uv_timer_start(
      &partial_timer_, [](uv_timer_t* t) { static_cast<Supervisor*>(t->data)->ShowPartialLines(); },
      static_cast<uint64_t>(std::max<int64_t>(1, after.count())), 0);
}

void Supervisor::ShowPartialLines() {
  const auto now = std::chrono::steady_clock::now();
  auto next = std::chrono::steady_clock::time_point::max();
  for (auto& r : readers_) next = std::min(next, r->ShowWaiting(now - kPartialLineWait));
  if (next == std::chrono::steady_clock::time_point::max()) return;
  ArmPartialLines(
      std::chrono::duration_cast<std::chrono::milliseconds>(next + kPartialLineWait - now));
}

void Supervisor::SetDumpHandler(int dump_signal, HangHandler handler) {
  dump_handler_ = std::move(handler);
  if (dump_signal_started_) return;
  uv_signal_init(&loop_, &dump_signal_);  // the loop's signal pipe is open: cannot fail
  // Without it a late dump signal takes its default action; nothing to fail the job for.
  (void)KeepCaught(dump_signal);
  dump_signal_.data = this;
  uv_signal_start(
      &dump_signal_,
      [](uv_signal_t* h, int) { static_cast<Supervisor*>(h->data)->DumpOnRequest(); }, dump_signal);
  dump_signal_started_ = true;
}

Status Supervisor::EnableFileTimer(const std::string& path) {
  auto server =
      FileTimerServer::Create(&loop_, path, [this](const ExpiredTimer& t) { OnTimerExpired(t); });
  if (!server.ok()) return server.status();
  file_timer_ = std::move(*server);
  file_timer_->SetBeforeExpiry([this] { CatchUpPauses(); });
  return Status::Ok();
}

// The pidfd is opened before the pid is looked up among the workers' trees:
// a pid reused in between is never signalled.
void Supervisor::OnTimerExpired(const ExpiredTimer& t) {
  ReapChildren();  // a worker that already exited is not failed by its timer (see Create)
  if (running_ == nullptr || running_->phase() != Phase::kRunning) return;
  const auto& workers = running_->workers();
  std::vector<pid_t> pids;
  for (const auto& w : workers) pids.push_back(w.state == WorkerState::kRunning ? w.pid : -1);
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, t.pid, 0)));
  std::optional<size_t> index;
  if (pidfd.valid()) index = OwningWorker(t.pid, pids, ParentPid);
  char what[160];
  std::snprintf(what, sizeof(what), "expired after %.1f s (limit %.1f s; %s)", t.held.count(),
                t.limit.count(), env::kEnableFileTimer);
  const std::string why = "file timer '" + t.scope + "' " + what;
  if (!index) {
    spdlog::warn("pid {}: {}; pid {} is {}: not signalled", t.pid, why, t.pid,
                 pidfd.valid() ? "no process of this job's workers" : "gone");
    return;
  }
  const WorkerRecord& w = workers[*index];
  if (t.signal <= 0) {
    spdlog::warn(
        "rank {} (local_rank {}, pid {}): {}; its client asked for no signal ({}): "
        "nothing done",
        w.rank, w.local_rank, t.pid, why, t.signal);
    return;
  }
  if (syscall(SYS_pidfd_send_signal, pidfd.get(), t.signal, nullptr, 0) != 0 && errno != ESRCH) {
    spdlog::error("file timer: send {} to pid {}: {}", SignalName(t.signal), t.pid,
                  std::strerror(errno));
  }
  const std::string sent = SignalName(t.signal) + " sent to " +
                           (t.pid == w.pid ? "it" : "its descendant pid " + std::to_string(t.pid));
  spdlog::error("rank {} (local_rank {}, pid {}): {}: {}", w.rank, w.local_rank, w.pid, why, sent);
  running_->OnTimerExpired(*index, why + ": " + sent, std::chrono::system_clock::now());
}

GroupResult Supervisor::RunGroup(const std::vector<WorkerSpec>& specs,
                                 const GroupOptions& options) {
  GroupState state(options, &control_, timer_.get());
  if (file_timer_) file_timer_->Clear();  // the last group's workers are gone
  options_ = options;
  heartbeats_.Clear();
  outputs_.clear();
  lost_log_paths_.clear();
  running_ = &state;
  timer_->Target(&state);
  if (pending_signal_ != 0) state.OnSignal(pending_signal_, std::chrono::system_clock::now());
  if (stop_requested_) state.OnStopRequest();
  StartJobControl();  // before the first worker: a Ctrl-Z meanwhile stops them all once started
  for (const auto& spec : specs) {
    if (state.phase() != Phase::kRunning) break;
    StartWorker(spec, state);
  }
  // A worker that could not be started fails the group as an exit would
  // (ReapChildren tells only of a running group's first failure).
  if (!state.failures().empty()) NotifyFailure(state);
  ReapChildren();  // exits that raced with the start-up
  if (start_handler_) start_handler_(state.workers());
  StartPauseWatch();
  ArmHangCheck();
  while (!state.done()) uv_run(&loop_, UV_RUN_ONCE);
  StopJobControl();
  StopPauseWatch();
  uv_timer_stop(&hang_timer_);
  timer_->Target(nullptr);
  Drain(state);
  if (file_timer_) file_timer_->Clear();
  running_ = nullptr;
  GroupResult result{state.outcome(),  state.received_signal(), state.workers(),
                     state.failures(), state.signals_sent(),    HeldElsewhere()};
  for (size_t i = 0; i < result.workers.size() && i < outputs_.size(); ++i) {
    result.workers[i].output_tail = std::move(outputs_[i].tail);
    result.workers[i].tail_has_stdout = outputs_[i].tail_has_stdout;
    result.workers[i].stderr_seen = outputs_[i].stderr_seen;
    result.workers[i].lost_logs = std::move(outputs_[i].lost_logs);
  }
  return result;
}

}  // namespace ddprun::supervisor
