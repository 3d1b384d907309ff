#include "launcher/group_outcome.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <random>

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
    } else if (w.state == supervisor::WorkerState::kStopped) {
      spdlog::info("rank {} (local_rank {}, pid {}) stopped by ddprun: {}", w.rank, w.local_rank,
                   w.pid, w.exit.Describe());
    }
  }
}

bool DiedOfPeer(const supervisor::FailureRecord& f) {
  if (f.exit.signal == SIGPIPE) return true;
  for (const char* sign : {"Connection reset by peer", "Connection closed by peer", "Broken pipe",
                           "ECONNRESET", "connection was closed by the remote"}) {
    if (f.message.find(sign) != std::string::npos) return true;
    // Its last lines: a worker that wrote no error file still said why.
    const size_t from = f.output_tail.size() > 1024 ? f.output_tail.size() - 1024 : 0;
    if (f.output_tail.find(sign, from) != std::string::npos) return true;
  }
  return false;
}

std::string DefaultTimerFile(const env::Environ& environ) {
  std::random_device rd;
  unsigned words[4] = {rd(), rd(), rd(), rd()};
  words[1] = (words[1] & 0xffff0fffu) | 0x00004000u;  // version 4
  words[2] = (words[2] & 0x3fffffffu) | 0x80000000u;  // RFC 4122 variant
  char uuid[40];
  std::snprintf(uuid, sizeof(uuid), "%08x-%04x-%04x-%04x-%04x%08x", words[0], words[1] >> 16,
                words[1] & 0xffffu, words[2] >> 16, words[2] & 0xffffu, words[3]);
  const std::string tmp = env::Lookup(environ, "TMPDIR").value_or("");
  return (tmp.empty() ? "/tmp" : tmp) + "/watchdog_timer_" + uuid;
}

}  // namespace ddprun::launcher
