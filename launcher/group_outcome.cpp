#include "launcher/group_outcome.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <random>
#include <set>

#include "env/host.hpp"
#include "env/log_layout.hpp"
#include "env/processes.hpp"

namespace ddprun::launcher {

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
    } else if (w.state == supervisor::WorkerState::kStopped && w.exit.signal == SIGPIPE) {
      // Not a signal ddprun sends: it wrote to a connection a stopped peer had closed.
      spdlog::info(
          "rank {} (local_rank {}, pid {}) ended while ddprun stopped the group: {} (it wrote "
          "to a connection that a stopped peer had closed)",
          w.rank, w.local_rank, w.pid, w.exit.Describe());
    } else if (w.state == supervisor::WorkerState::kStopped) {
      spdlog::info("rank {} (local_rank {}, pid {}) stopped by ddprun: {}", w.rank, w.local_rank,
                   w.pid, w.exit.Describe());
    }
  }
}

void WarnIfFull(const std::string& run_dir) {
  struct statvfs fs {};
  if (run_dir.empty() || statvfs(run_dir.c_str(), &fs) != 0 || fs.f_bavail > 0) return;
  spdlog::warn(
      "the filesystem of the log files ({}) is full (0 B free for this user): the workers wrote "
      "their own output there (--redirects), so what they wrote once it filled is lost, and "
      "ddprun could not see it; free space there, give --log_dir on a filesystem with room, or "
      "--tee, whose writes ddprun checks",
      run_dir);
}

std::string DefaultTimerFile(const env::Environ& environ) {
  std::random_device rd;
  unsigned words[4] = {rd(), rd(), rd(), rd()};
  words[1] = (words[1] & 0xffff0fffu) | 0x00004000u;  // version 4
  words[2] = (words[2] & 0x3fffffffu) | 0x80000000u;  // RFC 4122 variant
  char uuid[40];
  std::snprintf(uuid, sizeof(uuid), "%08x-%04x-%04x-%04x-%04x%08x", words[0], words[1] >> 16,
                words[1] & 0xffffu, words[2] >> 16, words[2] & 0xffffu, words[3]);
  return env::TempDirectory(env::Lookup(environ, "TMPDIR").value_or("")) + "/watchdog_timer_" +
         uuid;
}

// Hung, and none ever beat: those not connected to the job's store
// (where MASTER_ADDR:MASTER_PORT lead), when others did and wait there: the
// ranks that never joined, which the others wait for. A rank finishing (its
// heartbeat file removed) has been in the job: one that destroyed its
// process group is off the store for that (attack 92).
std::vector<int> TellNeverJoined(const supervisor::HangReport& report, int store_port) {
  if (report.hung.size() < 2 || store_port <= 0) return {};
  for (const auto& w : report.hung) {
    if (w.ever_beat || w.finishing) return {};
  }
  const std::set<unsigned long> to_store = env::ConnectionsToPort(store_port);
  const std::vector<env::ProcEntry> table = env::ReadProcTable();
  std::vector<int> joined, never;
  for (const auto& w : report.hung) {
    std::vector<pid_t> pids{w.pid};  // the worker, and what it runs (a wrapper script's python)
    for (const auto& e : env::Descendants(table, w.pid)) pids.push_back(e.pid);
    bool connected = false;
    for (pid_t pid : pids) {
      for (unsigned long inode : env::SocketInodes(pid)) connected |= to_store.count(inode) != 0;
    }
    (connected ? joined : never).push_back(w.rank);
  }
  if (joined.empty() || never.empty()) return {};
  std::string ranks;
  for (int r : never) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  spdlog::error(
      "rank{} {} {} not connected to the job's store (port {}), while the others are and wait "
      "there: {} did not join the job (stuck before init_process_group, or its connection "
      "fails)",
      never.size() > 1 ? "s" : "", ranks, never.size() > 1 ? "are" : "is", store_port,
      never.size() > 1 ? "they" : "it");
  return never;
}

std::string ReportHost(int node_rank, const std::optional<env::SlurmStep>& slurm) {
  std::string host = env::Fqdn();
  const std::string rank = node_rank >= 0 ? "node rank " + std::to_string(node_rank) : "";
  if (!slurm) return rank.empty() ? host : host + " (" + rank + ")";
  host += " (Slurm node " + (slurm->node_name.empty() ? "?" : slurm->node_name) +
          (rank.empty() ? "" : ", " + rank) + "; job step " + slurm->Id();
  if (slurm->restart_count > 0) {
    host += ", requeued " + std::to_string(slurm->restart_count) + " time(s): SLURM_RESTART_COUNT";
  }
  return host + ")";
}

}  // namespace ddprun::launcher
