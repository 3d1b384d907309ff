#include "launcher/agent.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>

#include "env/host.hpp"
#include "env/log_layout.hpp"
#include "env/names.hpp"
#include "env/worker_env.hpp"
#include "launcher/worker_specs.hpp"
#include "rendezvous/free_port.hpp"
#include "supervisor/failure_report.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::launcher {

namespace {

constexpr int kUsageExit = 2;

// The single-node "rendezvous": this node is rank 0 of one; its workers find
// the store that their rank 0 hosts at MASTER_ADDR:MASTER_PORT.
StatusOr<env::GroupInfo> SingleNodeGroup(const LaunchConfig& c, int attempt) {
  env::GroupInfo g;
  g.role = c.role;
  g.run_id = c.rdzv_id;
  g.local_world_size = c.nproc_per_node;
  g.world_size = c.nproc_per_node;
  g.master_addr = c.rdzv_backend == "static" ? c.master_addr
                                             : (c.local_addr.empty() ? env::Fqdn() : c.local_addr);
  if (c.master_port) {
    g.master_port = *c.master_port;
  } else {
    auto port = rendezvous::FindFreePort("");
    if (!port.ok()) return port.status().Annotate("choose MASTER_PORT");
    g.master_port = *port;
  }
  g.restart_count = attempt;
  g.max_restarts = c.max_restarts;
  g.use_agent_store = false;
  g.signals_to_handle = c.signals_to_handle;
  g.virtual_local_rank = c.virtual_local_rank;
  g.gpus = c.gpus;
  return g;
}

// Whether -r/-t/--duplicate_*_filters asked for files that must outlive the run.
bool WritesLogFiles(const LaunchConfig& c) {
  auto any = [](const StreamSelection& s) {
    if (s.all != 0) return true;
    for (const auto& [rank, bits] : s.by_rank) {
      if (bits != 0) return true;
    }
    return false;
  };
  return any(c.redirects) || any(c.tee) || !c.duplicate_stdout_filters.empty() ||
         !c.duplicate_stderr_filters.empty();
}

void LogStopped(const supervisor::GroupResult& r) {
  for (const auto& w : r.workers) {
    if (w.state == supervisor::WorkerState::kAbandoned) {
      spdlog::error(
          "rank {} (local_rank {}, pid {}) did not exit after SIGKILL (stuck in the "
          "kernel, state D?): abandoned",
          w.rank, w.local_rank, w.pid);
    } else if (w.state == supervisor::WorkerState::kStopped) {
      spdlog::info("rank {} (local_rank {}, pid {}) stopped by ddprun: {}", w.rank, w.local_rank,
                   w.pid, w.exit.Describe());
    }
  }
}

// Prints the report; returns the root cause.
supervisor::FailureRecord ReportFailure(const Program& program, const supervisor::GroupResult& r,
                                        const std::vector<std::string>& error_files,
                                        const env::Environ& environ) {
  auto failures = supervisor::CollectFailures(r, error_files);
  std::string report = supervisor::FormatReport(program.name, env::Fqdn(), failures);
  std::fputs(report.c_str(), stderr);
  if (auto own = env::Lookup(environ, env::kErrorFile); own && !own->empty()) {
    supervisor::DumpRootCause(failures.front(), *own);
  }
  return failures.front();
}

}  // namespace

int RunAgent(const LaunchConfig& c, const Program& program, const env::Environ& environ) {
  auto layout = env::LogLayout::Create(c.log_dir, c.rdzv_id);
  if (!layout.ok()) {
    spdlog::error("{}", layout.status().message());
    return 1;
  }
  auto sup = supervisor::Supervisor::Create(c.handled_signals);
  if (!sup.ok()) {
    spdlog::error("{}", sup.status().message());
    return kUsageExit;
  }
  if (c.nproc_per_node > 1 && !env::Lookup(environ, env::kOmpNumThreads)) {
    spdlog::warn(
        "OMP_NUM_THREADS is not set: setting it to 1 for each of the {} workers (set it "
        "to tune)",
        c.nproc_per_node);
  }
  supervisor::GroupOptions options;
  options.shutdown_timeout = supervisor::Duration(c.shutdown_timeout);
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (c.handled_signals.count(sig) != 0) options.forward_only.insert(sig);
  }
  for (int attempt = 0;; ++attempt) {
    if (int sig = (*sup)->pending_signal(); sig != 0) return 128 + sig;
    auto group = SingleNodeGroup(c, attempt);
    if (!group.ok()) {
      spdlog::error("{}", group.status().message());
      return 1;
    }
    if (Status s = layout->PrepareAttempt(attempt, c.nproc_per_node); !s.ok()) {
      spdlog::error("{}", s.message());
      return 1;
    }
    auto specs = BuildWorkerSpecs(c, program, *group, *layout, environ);
    if (!specs.ok()) {
      spdlog::error("{}", specs.status().message());
      return kUsageExit;
    }
    spdlog::info(
        "attempt {}: starting {} workers: world size {}, MASTER_ADDR={} MASTER_PORT={}, "
        "logs in {}",
        attempt, c.nproc_per_node, group->world_size, group->master_addr, group->master_port,
        layout->disabled() ? "/dev/null" : layout->AttemptDir(attempt));
    supervisor::GroupResult result = (*sup)->RunGroup(*specs, options);
    LogStopped(result);
    if (result.outcome == supervisor::Outcome::kSucceeded) {
      if (layout->base_is_temporary() && !WritesLogFiles(c)) {
        std::filesystem::remove_all(layout->base_dir());  // nothing in it worth keeping
      }
      return 0;
    }
    if (result.outcome == supervisor::Outcome::kInterrupted) {
      spdlog::warn("received {}: workers stopped", supervisor::SignalName(result.received_signal));
      return 128 + result.received_signal;
    }
    std::vector<std::string> error_files;
    for (int r = 0; r < c.nproc_per_node; ++r) error_files.push_back(layout->ErrorFile(attempt, r));
    int left = c.max_restarts - attempt;
    if (left > 0 && result.received_signal == 0) {
      auto failures = supervisor::CollectFailures(result, error_files);
      const auto& root = failures.front();
      spdlog::warn(
          "worker group failed: rank {} (local_rank {}, pid {}) {}; {}/{} restarts left: "
          "restarting the worker group",
          root.rank, root.local_rank, root.pid, root.exit.Describe(), left, c.max_restarts);
      continue;
    }
    return ReportFailure(program, result, error_files, environ).exit.ShellCode();
  }
}

}  // namespace ddprun::launcher
