// The supervisor's side of pauses (base/pause_clock.hpp): a tick while a hang
// limit or a file timer is armed, the workers' stopped state from /proc, and
// Ctrl-Z (SIGTSTP), which stops the workers together with the launcher (with
// the terminal's other signal, SIGWINCH, passed on to them).
#include <signal.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "env/processes.hpp"
#include "supervisor/console.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::supervisor {

namespace {

double Seconds(SteadyTime::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void Supervisor::StartPauseWatch() {
  const HangLimits l = Limits();
  // Across nodes, this node's stops are told to the others even without a limit of its own.
  const bool armed = l.hang_timeout.count() > 0 || l.startup_timeout.count() > 0 ||
                     l.exit_timeout.count() > 0 || file_timer_ != nullptr || peers_.held_here ||
                     peers_.held_elsewhere;
  stopped_pid_ = 0;
  told_pid_ = 0;
  console_waiting_ = false;
  console_told_ = false;
  console_held_ = HeldWorker{};
  held_told_ = HeldWorker{};
  held_elsewhere_.clear();
  pauses_.Start(std::chrono::steady_clock::now());
  pause_watch_armed_ = armed;
  if (!armed) return;
  const auto tick = static_cast<uint64_t>(PauseClock::kTick.count());
  uv_timer_start(
      &pause_timer_, [](uv_timer_t* t) { static_cast<Supervisor*>(t->data)->CatchUpPauses(); },
      tick, tick);
}

void Supervisor::StopPauseWatch() {
  uv_timer_stop(&pause_timer_);
  pause_watch_armed_ = false;
  stopped_pid_ = 0;
  told_pid_ = 0;
}

void Supervisor::CatchUpPauses() {
  using std::chrono::steady_clock;
  if (!pause_watch_armed_ || running_ == nullptr || running_->phase() != Phase::kRunning) return;
  const auto now = steady_clock::now();
  const WorkerRecord* stopped = nullptr;
  pid_t stopped_pid = 0;  // the worker, or its program under a wrapper
  char state = 0;
  for (const WorkerRecord& w : running_->workers()) {
    if (w.state != WorkerState::kRunning) continue;
    std::tie(stopped_pid, state) = env::StoppedInTree(w.pid);
    if (state != 0) {
      stopped = &w;
      break;
    }
  }
  std::vector<HeldWorker> elsewhere;
  if (peers_.held_elsewhere) elsewhere = peers_.held_elsewhere();
  const bool console_wait = LookForConsoleWait(now, stopped != nullptr || !elsewhere.empty());
  const PauseLook look =
      pauses_.Look(now, stopped != nullptr || console_wait || !elsewhere.empty());
  // Told when seen stopped at two looks in a row: a whole job continued
  // (SIGCONT to each process in turn) may show a worker stopped for a moment.
  const pid_t was = stopped_pid_;
  stopped_pid_ = stopped_pid;
  if (stopped != nullptr && stopped_pid == was && told_pid_ == 0) {
    told_pid_ = stopped_pid;
    paused_since_ = now - look.discounted;
    const std::string how =
        state == 't' ? "" : " (kill -CONT " + std::to_string(stopped_pid) + " continues it)";
    const std::string which =
        stopped_pid == stopped->pid
            ? ""
            : " waits for pid " + std::to_string(stopped_pid) + " below it, which";
    spdlog::info(
        "rank {} (local_rank {}, pid {}){} is {}: the job waits for it{}, so the hang limits and "
        "file timers do not count the time until it runs again",
        stopped->rank, stopped->local_rank, stopped->pid, which, env::WhyStopped(state), how);
  } else if (stopped == nullptr && told_pid_ != 0) {
    spdlog::info("pid {} runs again after {:.1f} s stopped{}", told_pid_,
                 Seconds(now - paused_since_),
                 console_wait || !elsewhere.empty() ? "; the job still waits (see above)"
                                                    : "; the hang limits count again");
    told_pid_ = 0;
  }
  // The other nodes are told at the first look that finds it (their limits,
  // as this node's, wait from then; the user is told at the second).
  HeldWorker here = console_held_;
  if (stopped != nullptr) {
    here = HeldWorker::Local(state, stopped->rank, stopped->local_rank, stopped_pid);
  }
  LookAcrossNodes(here, elsewhere, now);
  if (look_handler_) look_handler_(running_->workers());
  if (look.self_gap) {
    spdlog::info(
        "ddprun itself did not run for {:.1f} s (stopped, frozen or starved of CPU): the hang "
        "limits and file timers do not count that time",
        Seconds(look.discounted));
  }
  LeaveOut(look.discounted, now);
}

std::string DescribeHeld(const HeldWorker& w, bool past, bool who_only) {
  const std::string node = w.node_rank < 0 ? ""
                                           : " on node " + std::to_string(w.node_rank) +
                                                 (w.host.empty() ? "" : " (" + w.host + ")");
  const std::string what =
      w.state == 'C' ? "waiting for the console to read its output" : env::WhyStopped(w.state);
  if (past) return "rank " + std::to_string(w.rank) + node + " was " + what;
  const std::string who = "rank " + std::to_string(w.rank) + " (local_rank " +
                          std::to_string(w.local_rank) + ", pid " + std::to_string(w.pid) + ")" +
                          node;
  return who_only ? who : who + " is " + what;
}

void Supervisor::LookAcrossNodes(const HeldWorker& here, const std::vector<HeldWorker>& elsewhere,
                                 SteadyTime now) {
  if (peers_.held_here && here != held_told_) peers_.held_here(here);
  held_told_ = here;
  // Each one that came and went, said once; the limits count again only when
  // nothing holds the job, here or elsewhere.
  std::vector<HeldSince> still;
  for (const HeldSince& h : held_elsewhere_) {
    if (std::find(elsewhere.begin(), elsewhere.end(), h.worker) != elsewhere.end()) {
      still.push_back(h);
      continue;
    }
    const bool held = here.held() || !elsewhere.empty();
    spdlog::info("{} runs again after {:.1f} s{}", DescribeHeld(h.worker, false, true),
                 Seconds(now - h.since),
                 held ? "; the job still waits (see above)" : "; the hang limits count again");
  }
  for (const HeldWorker& w : elsewhere) {
    if (std::any_of(still.begin(), still.end(),
                    [&](const HeldSince& h) { return h.worker == w; })) {
      continue;
    }
    spdlog::info(
        "{}{}: the job waits for it, so the hang limits and file timers here do not count the "
        "time until it runs again",
        DescribeHeld(w),
        w.state == 'T' ? " (kill -CONT " + std::to_string(w.pid) + " there continues it)" : "");
    still.push_back({w, now});
  }
  held_elsewhere_ = std::move(still);
}

void Supervisor::LeaveOut(SteadyTime::duration paused, SteadyTime now) {
  if (paused.count() <= 0) return;
  // Beats from before the pause are placed first, then the pause is left out.
  const int64_t wall_now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  heartbeats_.Look(now, wall_now_ns, running_->workers());
  heartbeats_.Postpone(paused, now);
  if (file_timer_) file_timer_->Postpone(Duration(Seconds(paused)));
  ArmHangCheck();
}

// A dump on request stops each worker in turn to read its stacks, and its
// peers wait for it meanwhile: its time is left out, as a pause's.
void Supervisor::DumpOnRequest() {
  if (!dump_handler_) return;
  if (running_ == nullptr || running_->done()) {
    spdlog::warn(
        "dump requested (ddprun dump), but no workers run now (the rendezvous, a restart, or "
        "the end of the job): nothing to dump; ask again once they run");
    return;
  }
  CatchUpPauses();
  const auto start = std::chrono::steady_clock::now();
  dump_handler_(RunningReport());
  if (!pause_watch_armed_ || running_ == nullptr || running_->phase() != Phase::kRunning) return;
  const auto now = std::chrono::steady_clock::now();
  pauses_.Skip(now);
  LeaveOut(now - start, now);
}

void Supervisor::StartJobControl() {
  if (tstp_ready_)
    uv_signal_start(
        &tstp_, [](uv_signal_t* h, int) { static_cast<Supervisor*>(h->data)->StopTogether(); },
        SIGTSTP);
  // Each worker leads a session of its own, where no terminal sends it its
  // resize: a progress bar that redraws to the width learns it from here.
  if (winch_ready_)
    uv_signal_start(
        &winch_,
        [](uv_signal_t* h, int) {
          auto* self = static_cast<Supervisor*>(h->data);
          if (self->running_ == nullptr) return;
          for (const WorkerRecord& w : self->running_->workers()) {
            if (w.state == WorkerState::kRunning) self->control_.SignalGroup(w.pid, SIGWINCH);
          }
        },
        SIGWINCH);
}

void Supervisor::StopJobControl() {
  if (tstp_ready_) uv_signal_stop(&tstp_);  // SIGTSTP stops the launcher alone again
  if (winch_ready_) uv_signal_stop(&winch_);
}

// Ctrl-Z: the workers (each its own session, out of the terminal's reach)
// stop with the launcher, and continue with it. One already stopped (at a
// debugger's breakpoint, by the user) is left as it is, and stays stopped.
void Supervisor::StopTogether() {
  std::vector<pid_t> stopped;
  if (running_ != nullptr) {
    for (const WorkerRecord& w : running_->workers()) {
      if (w.state != WorkerState::kRunning || env::StoppedState(w.pid) != 0) continue;
      if (kill(-w.pid, SIGSTOP) == 0) stopped.push_back(w.pid);
    }
  }
  spdlog::info("SIGTSTP: {} worker(s) stop with ddprun; SIGCONT (fg, bg) continues them all",
               stopped.size());
  struct sigaction dfl {};
  struct sigaction caught {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGTSTP, &dfl, &caught);
  FlushConsole(std::chrono::milliseconds(200));  // its writer thread stops with us
  const auto before = std::chrono::steady_clock::now();
  raise(SIGTSTP);  // stops here, as any program does
  sigaction(SIGTSTP, &caught, nullptr);
  for (pid_t pgid : stopped) kill(-pgid, SIGCONT);
  if (std::chrono::steady_clock::now() - before < std::chrono::milliseconds(50)) {
    // The kernel drops SIGTSTP in an orphaned process group: nobody could continue it.
    spdlog::info(
        "SIGTSTP did not stop ddprun (its process group has no parent that could continue it, "
        "e.g. started with setsid): the workers continue");
  } else if (!stopped.empty()) {
    spdlog::info("continued after {:.1f} s stopped: {} worker(s) continue",
                 Seconds(std::chrono::steady_clock::now() - before), stopped.size());
  }
  CatchUpPauses();
}

}  // namespace ddprun::supervisor
