// Hang supervision (hang_check.hpp decides): the next moment a worker could
// be hung, and the look then, with the dump and the stop that follow.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "supervisor/hang_check.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::supervisor {

// Without limits nobody is hung, and every worker that ever beat counts as
// beating. The heartbeat files are read now: without a hang limit nothing
// else reads them.
HangReport Supervisor::RunningReport() {
  const auto now = std::chrono::steady_clock::now();
  const int64_t wall_now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  if (running_ != nullptr) heartbeats_.Look(now, wall_now_ns, running_->workers());
  return FindHung(Beats(), HangLimits{}, now).report;
}

std::vector<Beat> Supervisor::Beats() const { return heartbeats_.Beats(running_->workers()); }

HangLimits Supervisor::Limits() const {
  return {options_.hang_timeout, options_.startup_timeout, options_.exit_timeout};
}

// The earliest moment some worker could be hung; nothing is looked at before.
void Supervisor::ArmHangCheck() {
  using std::chrono::steady_clock;
  if (running_ == nullptr || running_->phase() != Phase::kRunning) return;
  const auto now = steady_clock::now();
  auto next = NextHangCheck(Beats(), Limits(), now);
  if (!next) return;
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(*next - now);
  uv_timer_start(
      &hang_timer_, [](uv_timer_t* t) { static_cast<Supervisor*>(t->data)->CheckHangs(); },
      static_cast<uint64_t>(std::max<long>(wait.count(), 0)) + 1, 0);
}

void Supervisor::CheckHangs() {
  using std::chrono::steady_clock;
  ReapChildren();  // as at the teardown deadline: exits first (see Create)
  if (running_ == nullptr || running_->phase() != Phase::kRunning) return;
  CatchUpPauses();  // time the job could not run does not count
  const auto now = steady_clock::now();
  // The system clock's now dates the heartbeat files' times.
  const int64_t wall_now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  heartbeats_.Look(now, wall_now_ns, running_->workers());
  HangVerdict verdict = FindHung(Beats(), Limits(), now);
  auto& hung = verdict.hung;
  const HangReport& report = verdict.report;
  if (hung.empty()) {
    ArmHangCheck();
    return;
  }
  const auto found = std::chrono::system_clock::now();
  if (hang_handler_) {
    const auto dump_start = steady_clock::now();
    std::vector<int> culprits = hang_handler_(report);
    auto is_culprit = [&](const HungWorker& h) {
      int rank = running_->workers()[h.index].rank;
      return std::find(culprits.begin(), culprits.end(), rank) != culprits.end();
    };
    std::stable_partition(hung.begin(), hung.end(), is_culprit);
    // A culprit not found hung itself (it still beats elsewhere, or never
    // beat) is the one the others wait for: it comes first, the root cause.
    std::vector<HungWorker> named;
    const auto& workers = running_->workers();
    for (size_t i = 0; i < workers.size(); ++i) {
      const bool culprit = std::count(culprits.begin(), culprits.end(), workers[i].rank) > 0;
      const bool listed =
          std::any_of(hung.begin(), hung.end(), [i](const HungWorker& h) { return h.index == i; });
      if (culprit && !listed && workers[i].state == WorkerState::kRunning) {
        named.push_back(
            {i, "hung: the workers found hung wait for it (the hang's verdict names it)", false});
      }
    }
    hung.insert(hung.begin(), named.begin(), named.end());
    // The dump took a while: a worker that exited meanwhile is judged by its
    // exit, and the dump's time is left out as a dump on request's (it was
    // not ddprun failing to run).
    ReapChildren();
    if (running_ == nullptr) return;
    const auto after = steady_clock::now();
    pauses_.Skip(after);
    if (pause_watch_armed_ && running_->phase() == Phase::kRunning) {
      LeaveOut(after - dump_start, after);
    }
  }
  std::string exited;
  for (const HungWorker& h : hung) {
    const WorkerRecord& w = running_->workers()[h.index];
    if (w.state != WorkerState::kSucceeded) continue;
    exited += (exited.empty() ? "" : ", ") + std::string("rank ") + std::to_string(w.rank);
  }
  if (running_->OnHang(hung, found)) return;
  if (!exited.empty()) {
    spdlog::warn("not hung after all: {} exited with code 0 while the dump was written", exited);
  }
  ArmHangCheck();  // for those still running (nothing when the group is over)
}

}  // namespace ddprun::supervisor
