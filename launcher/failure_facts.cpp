#include "launcher/failure_facts.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "base/format.hpp"
#include "env/interfaces.hpp"
#include "env/limits.hpp"
#include "env/names.hpp"
#include "env/port_holder.hpp"
#include "env/processes.hpp"
#include "env/trace_file.hpp"
#include "supervisor/torch_progress.hpp"
#include "supervisor/trace_analysis.hpp"

namespace ddprun::launcher {

void FailureFacts::GroupStarting(const std::vector<supervisor::WorkerSpec>& specs) {
  memory_at_start_ = env::ReadMemoryFacts();
  writes_own_logs_.assign(specs.size(), false);
  trace_files_.clear();
  torch_dir_.clear();
  ranks_.clear();
  const std::string trace = std::string(env::kTraceFile) + "=";
  const std::string torch = std::string(env::kTorchDir) + "=";
  for (size_t i = 0; i < specs.size(); ++i) {
    auto own = [](const supervisor::StreamSpec& s) { return !s.file.empty() && !s.NeedsPipe(); };
    writes_own_logs_[i] = own(specs[i].out) || own(specs[i].err);
    ranks_.push_back(specs[i].rank);
    for (const std::string& e : specs[i].envp) {
      if (e.size() > trace.size() && e.compare(0, trace.size(), trace) == 0) {
        trace_files_[specs[i].rank] = e.substr(trace.size());
      } else if (e.size() > torch.size() && e.compare(0, torch.size(), torch) == 0) {
        torch_dir_ = e.substr(torch.size());
      }
    }
  }
}

void FailureFacts::GroupFailed(int world_size, const supervisor::GroupResult& result,
                               const supervisor::FailureRecord& root) {
  peers_running_ = world_size == static_cast<int>(result.workers.size()) &&
                   std::all_of(result.workers.begin(), result.workers.end(), [&](const auto& w) {
                     return w.pid == root.pid || w.state == supervisor::WorkerState::kStopped ||
                            w.failed_while_stopping;
                   });
  unasked_signal_ = root.hung || root.timer || root.after_stop ? 0 : root.exit.signal;
  multi_node_ = world_size > static_cast<int>(result.workers.size());
  // The ranks whose programs had finished before the root cause ended.
  finished_ranks_.clear();
  finished_seconds_before_ = 0;
  auto root_record = std::find_if(result.workers.begin(), result.workers.end(),
                                  [&](const auto& w) { return w.pid == root.pid; });
  if (root_record != result.workers.end()) {
    for (const auto& w : result.workers) {
      if (w.state != supervisor::WorkerState::kSucceeded || w.exit_time > root_record->exit_time) {
        continue;
      }
      finished_ranks_.push_back(w.rank);
      const std::chrono::duration<double> before = root_record->exit_time - w.exit_time;
      finished_seconds_before_ = finished_ranks_.size() == 1
                                     ? before.count()
                                     : std::min(finished_seconds_before_, before.count());
    }
  }
  root_code_ = root.hung || root.timer || root.exit.signal != 0 ? 0 : root.exit.code;
  const auto rank = static_cast<size_t>(root.local_rank);
  root_writes_own_logs_ = rank < writes_own_logs_.size() && writes_own_logs_[rank];
  // A DDP worker's flight recorder outlives it: who never entered what the others timed out in.
  std::map<int, std::vector<env::TraceEntry>> traces;
  for (const auto& [r, path] : trace_files_) {
    if (auto entries = env::ReadTraceFile(path); entries.ok()) traces[r] = std::move(*entries);
  }
  never_entered_ = supervisor::NeverEntered(traces);
  diverged_ = supervisor::FirstMismatch(traces);
  // A PyTorch worker's last collectives, as the hook last wrote them: the ranks
  // of this host that did not enter one another waited in.
  torch_laggards_.clear();
  if (!torch_dir_.empty()) {
    const supervisor::TorchSide side =
        supervisor::NameLaggards(supervisor::ReadTorchProgress(torch_dir_, ranks_));
    if (!side.laggards.empty()) torch_laggards_ = side.verdict;
  }
  // The ranks found stopped (SIGSTOP, a debugger) as the group began to stop.
  std::map<char, std::vector<int>> stopped;
  for (const auto& w : result.workers) {
    if (w.stopped_at_stop != 0 && w.pid != root.pid) stopped[w.stopped_at_stop].push_back(w.rank);
  }
  stopped_.clear();
  for (const auto& [state, ranks] : stopped) {
    stopped_ += (stopped_.empty() ? "" : ", and ") + RanksNoun(ranks) +
                (ranks.size() == 1 ? " was " : " were ") + env::WhyStopped(state);
  }
  // And on other nodes, as they last told (the pause board).
  for (const HeldWorker& w : result.held_elsewhere) {
    if (w.stopped())
      stopped_ += (stopped_.empty() ? "" : ", and ") + supervisor::DescribeHeld(w, true);
  }
}

bool FailureFacts::AnyWritesOwnLogs() const {
  return std::find(writes_own_logs_.begin(), writes_own_logs_.end(), true) !=
         writes_own_logs_.end();
}

namespace {

bool IsShell(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  return name == "sh" || name == "bash" || name == "dash" || name == "zsh" || name == "ksh" ||
         name == "mksh";
}

}  // namespace

bool RunsAShell(const Program& program) {
  if (program.argv.empty() || !program.interpreter.empty()) return false;
  if (IsShell(program.argv[0])) return true;
  // A script whose #! line names a shell, directly or through env.
  const std::vector<std::string> words = Shebang(program.argv[0]);
  if (words.empty()) return false;
  if (std::filesystem::path(words[0]).filename() == "env") {
    return words.size() > 1 && IsShell(words[1]);
  }
  return IsShell(words[0]);
}

supervisor::ExplainContext FailureFacts::Context(const LaunchConfig& c, const Program& program,
                                                 const env::Environ& environ,
                                                 const std::string& run_dir) const {
  supervisor::ExplainContext x;
  x.interpreter = program.interpreter;
  x.interpreter_source = program.interpreter_source;
  x.nproc_per_node = c.nproc_per_node;
  x.visible_devices = c.visible_gpus.worker_devices;
  if (!x.visible_devices) x.visible_devices = env::Lookup(environ, env::kCudaVisibleDevices);
  if (c.visible_gpus.checked) x.visible_gpus = static_cast<int>(c.visible_gpus.gpus.size());
  x.limits = env::ReadLimitFacts(environ);
  struct statvfs shm {};
  if (statvfs("/dev/shm", &shm) == 0) x.shm_size_bytes = uint64_t{shm.f_blocks} * shm.f_frsize;
  struct statvfs logs {};
  if (!run_dir.empty() && statvfs(run_dir.c_str(), &logs) == 0) {
    x.log_dir = run_dir;
    x.log_free_bytes = uint64_t{logs.f_bavail} * logs.f_frsize;
    x.writes_own_logs = root_writes_own_logs_;
  }
  x.port_holder = [](int port) { return env::PortHolder(port); };
  x.interfaces = env::ListInterfaces();
  x.gloo_socket_ifname = env::Lookup(environ, env::kGlooSocketIfname).value_or("");
  x.nccl_socket_ifname = env::Lookup(environ, env::kNcclSocketIfname).value_or("");
  x.nccl_socket_family = env::Lookup(environ, env::kNcclSocketFamily).value_or("");
  x.peers_running = peers_running_;
  x.multi_node = multi_node_;
  x.unasked_signal = unasked_signal_;
  // A shell's 128+N: a command it ran died of signal N (bash, dash, zsh).
  if (root_code_ > 128 && root_code_ <= 128 + 64 && RunsAShell(program)) {
    x.unasked_signal = root_code_ - 128;
    x.signal_via_shell = true;
  }
  x.memory = env::OomKillsSince(memory_at_start_, env::ReadMemoryFacts());
  x.never_entered = never_entered_;
  x.torch_laggards = torch_laggards_;
  x.diverged = diverged_;
  x.stopped = stopped_;
  x.finished_ranks = finished_ranks_;
  x.finished_seconds_before = finished_seconds_before_;
  return x;
}

}  // namespace ddprun::launcher
