#include "supervisor/group_state.hpp"

#include <algorithm>
#include <csignal>

namespace ddprun::supervisor {

bool IsJobSignal(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

GroupState::GroupState(GroupOptions options, ProcessControl* control, Timer* timer)
    : options_(std::move(options)), control_(control), timer_(timer) {}

void GroupState::AddWorker(int local_rank, int rank, pid_t pid) {
  WorkerRecord w;
  w.local_rank = local_rank;
  w.rank = rank;
  w.pid = pid;
  workers_.push_back(std::move(w));
}

Outcome GroupState::outcome() const {
  if (phase_ != Phase::kDone) return Outcome::kRunning;
  if (!failures_.empty()) return Outcome::kFailed;
  if (received_signal_ != 0) return Outcome::kInterrupted;
  if (stop_requested_) return Outcome::kStopped;
  return Outcome::kSucceeded;
}

bool GroupState::AnyRunning() const {
  for (const auto& w : workers_) {
    if (w.state == WorkerState::kRunning) return true;
  }
  return false;
}

void GroupState::OnExits(const std::vector<std::pair<pid_t, ExitStatus>>& exits, WallTime now) {
  bool new_failure = false;
  for (const auto& [pid, status] : exits) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      WorkerRecord& w = workers_[i];
      if (w.pid != pid || w.state != WorkerState::kRunning) continue;
      w.exit = status;
      const bool declared = !w.hang.empty() || !w.timer.empty();
      if (!declared) w.exit_time = now;  // a declared failure keeps the time it was declared
      if (declared) {
        w.state = WorkerState::kFailed;  // already counted when declared
      } else if (status.success()) {
        w.state = WorkerState::kSucceeded;
      } else if (phase_ == Phase::kRunning) {
        w.state = WorkerState::kFailed;
        failures_.push_back(i);
        new_failure = true;
      } else {
        w.state = WorkerState::kStopped;
      }
    }
  }
  if (new_failure) BeginStop(SIGTERM);
  FinishIfAllExited();
}

void GroupState::NoteCrashedFinishing(size_t index, Duration finished_for) {
  if (index < workers_.size()) workers_[index].crashed_finished_for = finished_for.count();
}

void GroupState::OnStartFailure(int local_rank, int rank, ExitStatus as_exit, WallTime now,
                                std::string why) {
  WorkerRecord w;
  w.local_rank = local_rank;
  w.rank = rank;
  w.state = WorkerState::kFailed;
  w.exit = as_exit;
  w.exit_time = now;
  w.start_error = std::move(why);
  workers_.push_back(std::move(w));
  failures_.push_back(workers_.size() - 1);
  BeginStop(SIGTERM);
  FinishIfAllExited();
}

void GroupState::OnSignal(int sig, WallTime now) {
  if (options_.forward_only.count(sig) != 0) {
    if (phase_ != Phase::kDone) SignalSurvivors(sig);
    return;
  }
  if (sig == SIGINT && interrupts_++ == 0) first_interrupt_ = now;
  if (phase_ == Phase::kRunning) {
    received_signal_ = sig;
    BeginStop(sig);
    FinishIfAllExited();
    return;
  }
  ExcuseDeathsBy(sig);
  FinishIfAllExited();  // a group settling for that signal is done now
  // Ctrl-C while stopping (for any reason but that very Ctrl-C): do not wait
  // out the grace. Repeated SIGTERMs are one request (slurmstepd sends two,
  // ~30 ms apart, at the time limit) and must not cost the workers their
  // checkpoint.
  const bool again = interrupts_ > 1 && now - first_interrupt_ >= kOnePress;
  const bool impatient = sig == SIGINT && (received_signal_ != SIGINT || again);
  if (phase_ == Phase::kStopping && impatient) OnTimer();
}

// The signal that reached ddprun reached the workers too (a scheduler such as
// Slurm signals every process of the step; a terminal its foreground group):
// workers that died of that very signal before ddprun saw its own were
// stopped with the job, not failures that call for a report or a restart.
void GroupState::ExcuseDeathsBy(int sig) {
  if (received_signal_ != 0 || failures_.empty()) return;
  for (size_t i : failures_) {
    const WorkerRecord& w = workers_[i];
    if (w.exit.signal != sig || !w.hang.empty() || !w.timer.empty() || !w.start_error.empty()) {
      return;
    }
  }
  for (size_t i : failures_) workers_[i].state = WorkerState::kStopped;
  failures_.clear();
  received_signal_ = sig;
}

bool GroupState::OnHang(const std::vector<HungWorker>& hung, WallTime found) {
  const bool running = phase_ == Phase::kRunning;
  const bool failed_since = phase_ != Phase::kDone && received_signal_ == 0 && !stop_requested_ &&
                            !failures_.empty() &&
                            std::all_of(failures_.begin(), failures_.end(),
                                        [&](size_t i) { return workers_[i].exit_time > found; });
  if (!running && !failed_since) return false;
  bool declared = false;
  for (const HungWorker& h : hung) {
    if (Declare(h.index, &WorkerRecord::hang, h.why, found)) {
      workers_[h.index].hang_at_exit = h.at_exit;
      declared = true;
    }
  }
  if (!declared) return false;  // every one has exited meanwhile: its exit decides
  if (running) BeginStop(SIGTERM);
  FinishIfAllExited();
  return true;
}

void GroupState::OnTimerExpired(size_t index, std::string why, WallTime now) {
  if (phase_ != Phase::kRunning || !Declare(index, &WorkerRecord::timer, std::move(why), now)) {
    return;
  }
  BeginStop(SIGTERM);
  FinishIfAllExited();
}

// A running worker the launcher finds failed before it exited: `why` in
// `field`, counted as a failure now. False when it is no running worker.
bool GroupState::Declare(size_t index, std::string WorkerRecord::*field, std::string why,
                         WallTime now) {
  if (index >= workers_.size() || workers_[index].state != WorkerState::kRunning) return false;
  WorkerRecord& w = workers_[index];
  w.*field = std::move(why);
  w.exit_time = now;
  // In the order of the failures' times: a hang found before the dump comes
  // before an exit seen during it.
  failures_.insert(std::find_if(failures_.begin(), failures_.end(),
                                [&](size_t i) { return workers_[i].exit_time > now; }),
                   index);
  return true;
}

void GroupState::OnStopRequest() {
  if (phase_ != Phase::kRunning) return;
  stop_requested_ = true;
  BeginStop(SIGTERM);
  FinishIfAllExited();
}

std::vector<pid_t> GroupState::pids() const {
  std::vector<pid_t> out;
  for (const auto& w : workers_) out.push_back(w.pid);
  return out;
}

void GroupState::OnTimer() {
  if (settling_) {
    settling_ = false;
    settled_ = true;
    FinishIfAllExited();
    return;
  }
  if (phase_ == Phase::kStopping) {
    phase_ = Phase::kKilling;
    SignalSurvivors(SIGKILL);
    timer_->Arm(options_.kill_timeout);
    return;
  }
  if (phase_ == Phase::kKilling) {
    for (auto& w : workers_) {
      if (w.state == WorkerState::kRunning) w.state = WorkerState::kAbandoned;
    }
    FinishIfAllExited();
  }
}

void GroupState::BeginStop(int sig) {
  if (phase_ != Phase::kRunning) return;
  phase_ = Phase::kStopping;
  if (!AnyRunning()) return;
  for (WorkerRecord& w : workers_) {
    if (w.state == WorkerState::kRunning) w.stopped_at_stop = control_->StoppedState(w.pid);
  }
  SignalSurvivors(sig);
  // A worker stopped (SIGSTOP, a job-control stop) acts on the signal only
  // once continued: without SIGCONT it would sit out the whole grace.
  SignalSurvivors(SIGCONT);
  timer_->Arm(options_.shutdown_timeout);
}

void GroupState::SignalSurvivors(int sig) {
  signals_sent_.insert(sig);
  for (const auto& w : workers_) {
    if (w.state == WorkerState::kRunning) control_->SignalGroup(w.pid, sig);
  }
}

void GroupState::FinishIfAllExited() {
  if (AnyRunning() || phase_ == Phase::kDone) return;
  if (!settled_ && DiedOfJobSignalsOnly()) {
    if (!settling_) {
      timer_->Cancel();
      timer_->Arm(kJobSignalSettle);
      settling_ = true;
    }
    return;
  }
  timer_->Cancel();
  settling_ = false;
  phase_ = Phase::kDone;
}

bool GroupState::DiedOfJobSignalsOnly() const {
  if (failures_.empty() || received_signal_ != 0 || stop_requested_) return false;
  return std::all_of(failures_.begin(), failures_.end(), [&](size_t i) {
    const WorkerRecord& w = workers_[i];
    const int sig = w.exit.signal;
    return w.hang.empty() && w.timer.empty() && w.start_error.empty() && IsJobSignal(sig);
  });
}

}  // namespace ddprun::supervisor
