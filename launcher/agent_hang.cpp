// The agent's side of a hang and of a dump request: the debug dump, the
// verdicts it prints, and NCCL's RAS address for the workers.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "env/names.hpp"
#include "launcher/agent_impl.hpp"
#include "launcher/dump_request.hpp"
#include "launcher/group_outcome.hpp"
#include "rendezvous/free_port.hpp"
#include "supervisor/console.hpp"
#include "supervisor/debug_dump.hpp"
#include "supervisor/late_signals.hpp"
#include "supervisor/torch_progress.hpp"

namespace ddprun::launcher::internal {

void Agent::HandleHangs() {
  sup_->SetHangHandler([this](const supervisor::HangReport& report) {
    for (const auto& w : report.hung) {
      if (w.finishing) {
        spdlog::error(
            "rank {} (local_rank {}, pid {}) hung at exit: removed its heartbeat file {:.1f} s "
            "ago and has not exited",
            w.rank, w.local_rank, w.pid, w.silent_seconds);
        continue;
      }
      spdlog::error("rank {} (local_rank {}, pid {}) hung: {} for {:.1f} s", w.rank, w.local_rank,
                    w.pid, w.ever_beat ? "no heartbeat" : "no first heartbeat", w.silent_seconds);
    }
    return DumpWorkers(report, layout_->DumpDir(round_ ? round_->restart_count : 0));
  });
  sup_->SetStartHandler(
      [this](const std::vector<supervisor::WorkerRecord>& w) { record_.WorkersStarted(w); });
  if (c_.hang_detect_torch) {
    sup_->SetLookHandler(
        [this](const std::vector<supervisor::WorkerRecord>& w) { LookForHooklessPythons(w); });
  }
  sup_->SetDumpHandler(DumpSignal(), [this](const supervisor::HangReport& report) {
    static int requests = 0;
    DumpWorkers(report, layout_->DumpDir(round_ ? round_->restart_count : 0) + "/request_" +
                            std::to_string(++requests));
    return std::vector<int>{};
  });
}

// A wrapper that sets PYTHONPATH instead of adding to it, or runs python -E,
// leaves the rank unwatched: said as soon as its Python is seen (attack 112).
void Agent::LookForHooklessPythons(const std::vector<supervisor::WorkerRecord>& workers) {
  const auto now = std::chrono::steady_clock::now();
  if (torch_hook_dir_.empty() || now < next_hook_look_ || !round_) return;
  next_hook_look_ = now + kHookLook;
  const std::string torch_dir = layout_->DumpDir(round_->restart_count) + "/torch";
  for (const auto& w : workers) {
    if (w.state != supervisor::WorkerState::kRunning || hook_looked_.count(w.rank) != 0) continue;
    if (supervisor::ReadTorchPython(torch_dir, w.rank)) {
      hook_looked_.insert(w.rank);  // its hook made the process group: it is watched
      continue;
    }
    const auto hookless = FindHooklessPython(w.pid, torch_hook_dir_);
    if (!hookless) continue;
    hook_looked_.insert(w.rank);
    spdlog::warn(
        "rank {} (local_rank {}, pid {}): its Python (pid {}: {}) runs without the hook of "
        "--hang_detect=torch: {}, without ddprun's hook directory {}; its collectives are not "
        "watched, no hang of it is found and `ddprun dump` sees none of them: a wrapper should "
        "add to PYTHONPATH (export PYTHONPATH=/your/dir:$PYTHONPATH) and run python without "
        "-E, -I or -S; or use --hang_detect=heartbeat",
        w.rank, w.local_rank, w.pid, hookless->pid, hookless->command, hookless->why,
        torch_hook_dir_);
  }
}

std::string Agent::HooklessRanks(const std::string& torch_dir,
                                 const std::vector<supervisor::DumpTarget>& targets) const {
  std::string said;
  for (const auto& t : targets) {
    if (torch_hook_dir_.empty() || supervisor::ReadTorchPython(torch_dir, t.rank)) continue;
    const auto hookless = FindHooklessPython(t.pid, torch_hook_dir_);
    if (!hookless) continue;
    said += (said.empty() ? "" : "; ") + std::string("rank ") + std::to_string(t.rank) +
            "'s Python (pid " + std::to_string(hookless->pid) + ") runs without ddprun's hook (" +
            hookless->why + ")";
  }
  return said;
}

// NCCL's RAS service listens on localhost:28028 in every NCCL job unless told
// otherwise: two jobs on one host would answer for each other. Each job gets a
// loopback port of its own (chosen once; the workers of every attempt bind it),
// unless the user set NCCL_RAS_ADDR or turned RAS off.
std::string Agent::NcclRasAddr() {
  if (!nccl_ras_addr_.empty()) return nccl_ras_addr_;
  if (env::Lookup(environ_, env::kNcclRasEnable).value_or("1") == "0") return "";
  if (auto own = env::Lookup(environ_, env::kNcclRasAddr); own && !own->empty()) {
    return nccl_ras_addr_ = *own;
  }
  auto port = rendezvous::FindFreePort("127.0.0.1");
  if (!port.ok()) {
    spdlog::warn("no NCCL_RAS_ADDR for the job ({}): a hang report will not ask NCCL's RAS",
                 port.status().message());
    return "";
  }
  return nccl_ras_addr_ = "127.0.0.1:" + std::to_string(*port);
}

std::vector<int> Agent::DumpWorkers(const supervisor::HangReport& report, const std::string& dir) {
  std::vector<int> never_joined = TellNeverJoined(report, stores_.rdzv_port);
  if (layout_->disabled()) {
    spdlog::warn("no debug dump: --log_dir=/dev/null leaves nowhere to write it");
    return never_joined;
  }
  const auto now = std::chrono::system_clock::now();
  supervisor::DumpRequest request;
  request.dir = dir;
  for (const auto& w : report.running) {
    request.targets.push_back(
        {w.rank, w.local_rank, w.pid, layout_->TracePath(round_->restart_count, w.local_rank)});
  }
  for (const auto& w : report.hung) {
    auto quiet = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::duration<double>(w.quiet_seconds));
    request.hung.push_back({w.rank, now - quiet, w.finishing, w.silent_seconds, now});
  }
  request.beating = report.beating_ranks;
  // A terminating signal during the dump cuts it short: the tools can take seconds.
  request.interrupted = [at = supervisor::CountedDeliveries()] {
    return supervisor::CountedDeliveries() != at;
  };
  request.tool_env_entry = sup_->ContainmentMark();
  std::string verdict;
  // Hung at exit: past their collectives, the hook gone; PyTorch's records would say nothing.
  const bool at_exit_only =
      !report.hung.empty() && std::all_of(report.hung.begin(), report.hung.end(),
                                          [](const auto& w) { return w.finishing; });
  if (c_.hang_detect_torch && !at_exit_only) {
    request.torch_dir = layout_->DumpDir(round_ ? round_->restart_count : 0) + "/torch";
    request.python = program_.interpreter;
    supervisor::FindTorchPythons(request);
    // `ddprun python3 train.py`: the program is the interpreter (no rank's hook may have spoken).
    if (request.python.empty() && !program_.argv.empty() && IsPythonName(program_.argv[0])) {
      request.python = program_.argv[0];
    }
    request.nccl_ras_addr = nccl_ras_addr_;
    // Named now: the stacks and PyTorch's own dumps take seconds more.
    std::vector<int> ranks;
    for (const auto& t : request.targets) ranks.push_back(t.rank);
    const supervisor::TorchSide side = supervisor::NameLaggards(
        supervisor::ReadTorchProgress(request.torch_dir, ranks), report.beating_ranks);
    verdict = side.verdict;
    // The hook beats when collectives move: a rank that beat and left no progress file made
    // some, and its hook could not write them (a full disk; it said so in its output).
    std::string beat_unrecorded;
    for (const auto& w : report.hung) {
      if (w.ever_beat && !w.finishing && !supervisor::ProgressRecorded(request.torch_dir, w.rank)) {
        beat_unrecorded += (beat_unrecorded.empty() ? "" : ",") + std::to_string(w.rank);
      }
    }
    if (!beat_unrecorded.empty() && side.none_recorded) {
      verdict = "rank(s) " + beat_unrecorded +
                " made collectives, but the hook could not record them (its lines in the "
                "workers' output say why: a full or removed log directory): where the hang is "
                "is not known";
    }
    // A rank whose Python runs without the hook has no record, whatever it did (attack 112).
    if (const std::string hookless = HooklessRanks(request.torch_dir, request.targets);
        !hookless.empty()) {
      verdict = side.none_recorded
                    ? hookless + ": where the hang is is not known"
                    : verdict + "; " + hookless + ": it counts as behind, having no record";
    }
    if (report.hung.empty()) {  // a dump on request: nothing is said to hang
      spdlog::info(
          "dump on request: PyTorch's collectives now: {}; dumping stacks and flight "
          "recorders",
          side.state);
    } else {
      spdlog::error("hang, by PyTorch's collectives: {}; dumping stacks and flight recorders",
                    verdict);
    }
  }
  if (!report.hung.empty()) record_.HangDetected(report, verdict);
  if (round_) {
    // The analysis covers this node's ranks and says which it cannot see.
    for (int r = 0; r < round_->world_size; ++r) {
      if (r < round_->base_rank || r >= round_->base_rank + c_.nproc_per_node) {
        request.unseen[r] = "on another node: that node's agent dumps it";
      }
    }
  }
  auto dump = supervisor::WriteDebugDump(request);
  if (!dump.ok()) {
    spdlog::error("{}", dump.status().message());
    return {};
  }
  if (!report.hung.empty()) hang_all_waiting_ = dump->all_waiting;
  supervisor::ConsoleWriter::For(STDERR_FILENO).WriteOwnLine(dump->summary);
  if (dump->not_kept.empty()) {
    spdlog::info("debug dump of {} workers in {}", request.targets.size(), dir);
  } else {
    spdlog::error(
        "debug dump of {} workers not kept whole in {}: {}: the summary above is what there is; "
        "free space in the log directory's filesystem, or give --log_dir on one with room",
        request.targets.size(), dir, dump->not_kept);
  }
  record_.DumpWritten(dir, dump->stragglers);
  return dump->stragglers.empty() ? never_joined : dump->stragglers;
}

}  // namespace ddprun::launcher::internal
