// The agent's side of a worker group's end: what it tells the job record
// (the outcome, the failure's cause as the record keeps it, and a failure
// told early, as the others begin to be stopped).
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include "launcher/agent_impl.hpp"
#include "launcher/group_outcome.hpp"
#include "supervisor/explain.hpp"
#include "supervisor/failure_report.hpp"

namespace ddprun::launcher::internal {

rendezvous::WorkersOutcome Agent::Outcome(const rendezvous::RoundResult& round,
                                          const supervisor::GroupResult& result) {
  rendezvous::WorkersOutcome o;
  using Kind = rendezvous::WorkersOutcome::Kind;
  last_group_failed_ = result.outcome == supervisor::Outcome::kFailed;
  switch (result.outcome) {
    case supervisor::Outcome::kSucceeded:
      o.kind = Kind::kSucceeded;
      return o;
    case supervisor::Outcome::kInterrupted:
      spdlog::warn("received {}: workers stopped", supervisor::SignalName(result.received_signal));
      o.kind = Kind::kInterrupted;
      record_.Signal(result.received_signal);
      o.signal = result.received_signal;
      o.signal_name = supervisor::SignalName(result.received_signal);
      return o;
    case supervisor::Outcome::kStopped:
    case supervisor::Outcome::kRunning:
      o.kind = Kind::kStopped;
      return o;
    case supervisor::Outcome::kFailed:
      break;
  }
  local_failures_ = supervisor::CollectFailures(result, ErrorFiles(round.restart_count),
                                                /*python=*/!program_.interpreter.empty());
  NoteHiddenOutput(local_failures_);
  for (auto& f : local_failures_) {
    // An exit code of 128 + a crash signal is a shell's word for a crash of what it ran; a
    // program's own exit code is its own (the supervisor took either for a crash).
    if (f.exit.signal == 0 && !RunsAShell(program_)) f.crashed_at_exit_after = -1;
  }
  const auto& root = local_failures_.front();
  facts_.GroupFailed(round.world_size, result, root);
  o.kind = Kind::kFailed;
  // Only hangs at exit: every hung worker's program had finished (no restart runs it again).
  const bool at_exit =
      root.hung_at_exit && std::all_of(local_failures_.begin(), local_failures_.end(),
                                       [](const auto& f) { return !f.hung || f.hung_at_exit; });
  // A peer's failure to wait for is another node's: in a round of this
  // node's workers alone, any that failed first is among them already.
  const bool other_nodes = round.world_size > static_cast<int>(result.workers.size());
  // Or it crashed on its way out, its program finished: not restarted either, unless a
  // peer's going away (another node's failure, recorded there) made it crash.
  const bool crashed_at_exit = root.crashed_at_exit_after >= 0 && !root.after_stop;
  o.cause.cls = at_exit                                       ? rendezvous::FailureClass::kExitHang
                : root.hung                                   ? rendezvous::FailureClass::kHang
                : other_nodes && supervisor::DiedOfPeer(root) ? rendezvous::FailureClass::kPeer
                : crashed_at_exit                             ? rendezvous::FailureClass::kExitCrash
                                                              : rendezvous::FailureClass::kWorker;
  // Every rank here hung inside a collective: a rank on another node that
  // never entered it is the likelier cause, which its agent records first.
  o.settle = root.hung && other_nodes && hang_all_waiting_;
  if (o.settle) {
    spdlog::info(
        "every rank of this node waits inside a collective: the hang's cause is likelier on "
        "another node, whose agent is given {:.0f} s to record it first",
        std::chrono::duration<double>(PeerSettle()).count());
  }
  const rendezvous::FailureClass cls = o.cause.cls;
  o.cause = CauseOf(root);
  o.cause.cls = cls;
  spdlog::warn("worker group failed: {} ({} failure); the job record decides what follows",
               o.cause.what, rendezvous::FailureClassName(o.cause.cls));
  record_.Failure(o.cause);
  return o;
}

namespace {

// A message of several lines (a hung rank that had raised: the hang, then the
// traceback) as the job record's one line: its first and its last.
std::string OneLine(const std::string& message) {
  const size_t first_end = message.find('\n');
  if (first_end == std::string::npos) return message;
  size_t end = message.find_last_not_of("\n ");
  const size_t start = message.rfind('\n', end) + 1;
  std::string first = message.substr(0, first_end);
  if (start <= first_end) return first;
  if (!first.empty() && first.back() == ':') first.pop_back();
  return first + ": " + message.substr(start, end + 1 - start);
}

}  // namespace

// A failed worker that left no error file and whose stderr went nowhere
// (--local_ranks_filter leaves its local rank out, and no log file keeps it,
// as under torchrun): the report says why it has nothing more to show.
void Agent::NoteHiddenOutput(std::vector<supervisor::FailureRecord>& failures) const {
  if (c_.local_ranks_filter.empty()) return;
  for (auto& f : failures) {
    const bool kept = ((c_.redirects.For(f.local_rank) | c_.tee.For(f.local_rank)) & 2) != 0;
    if (c_.local_ranks_filter.count(f.local_rank) != 0 || kept || !f.output_tail.empty() ||
        f.error_file != supervisor::kNotAvailable || f.pid <= 0) {
      continue;
    }
    f.message += "\nits output was not kept: --local_ranks_filter leaves out local rank " +
                 std::to_string(f.local_rank) +
                 " and no log file holds its stderr; --redirects 2 or --tee 2 keep it in one";
  }
}

rendezvous::Cause Agent::CauseOf(const supervisor::FailureRecord& root) {
  rendezvous::Cause c;
  c.exit_code = root.hung ? exit_code::kHang : root.raised_first ? 1 : root.exit.ShellCode();
  c.rank = root.rank;
  c.local_rank = root.local_rank;
  c.pid = root.pid;
  c.what =
      "rank " + std::to_string(root.rank) + " (local_rank " + std::to_string(root.local_rank) +
      (root.pid > 0 ? ", pid " + std::to_string(root.pid) + ") " +
                          (root.hung || root.timer ? OneLine(root.message) : root.exit.Describe())
                    : ") could not be started: " + root.message);
  return c;
}

void Agent::FailedEarly(const supervisor::GroupResult& so_far) {
  if (!round_ || !driver_ || so_far.failures.empty() ||
      round_->world_size <= static_cast<int>(so_far.workers.size())) {
    return;  // no other node to tell
  }
  const auto failures = supervisor::CollectFailures(so_far, ErrorFiles(round_->restart_count),
                                                    /*python=*/!program_.interpreter.empty());
  const auto& root = failures.front();
  // A worker that lost its peer may be another node's victim: its cause
  // waits for the peer settle time after the exit, as before.
  if (root.hung || supervisor::DiedOfPeer(root)) return;
  // Killed by what may be the job's own signal (its copy to ddprun a moment
  // behind): the group settles before it is a failure (GroupState).
  if (supervisor::IsJobSignal(root.exit.signal)) return;
  rendezvous::WorkersOutcome o;
  o.kind = rendezvous::WorkersOutcome::Kind::kFailed;
  o.cause = CauseOf(root);
  o.cause.cls = rendezvous::FailureClass::kWorker;
  driver_->FailedEarly(o);
}

}  // namespace ddprun::launcher::internal
