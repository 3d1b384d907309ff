#include "launcher/dump_request.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include "base/parse.hpp"

namespace ddprun::launcher {

namespace {

// What /proc/PID/status says of `pid`: its name (comm), state letter, and
// whether it catches `sig` (SigCgt, a hexadecimal mask with bit sig-1 for
// signal sig). Name "" when there is no such process.
struct Catching {
  std::string name;
  char state = '?';
  bool catches = false;
  bool IsDdprun() const { return name == "ddprun"; }
};

Catching StatusOf(int pid, int sig) {
  Catching c;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Name:", 0) == 0) {
      const size_t at = line.find_first_not_of(" \t", 5);
      if (at != std::string::npos) c.name = line.substr(at);
    } else if (line.rfind("State:", 0) == 0) {
      const size_t at = line.find_first_not_of(" \t", 6);
      if (at != std::string::npos) c.state = line[at];
    } else if (line.rfind("SigCgt:", 0) == 0) {
      const uint64_t mask = std::strtoull(line.c_str() + 7, nullptr, 16);
      c.catches = sig >= 1 && sig <= 64 && ((mask >> (sig - 1)) & 1U) != 0;
    }
  }
  return c;
}

// The ddprun processes other than this one that take dump requests now.
std::vector<int> RunningLaunchers() {
  std::vector<int> pids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    const Catching c = StatusOf(pid, DumpSignal());
    if (c.IsDdprun() && c.catches) pids.push_back(pid);
  }
  closedir(d);
  return pids;
}

}  // namespace

std::optional<int> MaybeRequestDump(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "dump") return std::nullopt;
  int pid = 0;
  if (args.size() == 2) {
    auto n = ParseInteger("pid", args[1], 1, std::numeric_limits<int>::max(), "");
    pid = n.ok() ? static_cast<int>(*n) : 0;
  } else if (args.size() == 1) {
    auto pids = RunningLaunchers();
    if (pids.size() != 1) {
      std::fprintf(stderr,
                   "ddprun dump: %zu ddprun processes supervise workers: give the pid, e.g. "
                   "ddprun dump 12345 (pgrep -a ddprun lists them)\n",
                   pids.size());
      return 1;
    }
    pid = pids[0];
  }
  if (pid <= 0 || args.size() > 2) {
    std::fprintf(stderr, "ddprun dump: usage: ddprun dump [PID]\n");
    return 2;
  }
  const Catching status = StatusOf(pid, DumpSignal());
  if (!status.IsDdprun() || status.state == 'Z' || status.state == 'X') {
    std::fprintf(stderr, "ddprun dump: process %d is not a running ddprun%s\n", pid,
                 status.state == 'Z' ? " (it has exited; its parent has not reaped it)" : "");
    return 1;
  }
  if (!status.catches) {
    std::fprintf(stderr,
                 "ddprun dump: ddprun %d supervises no job that it could dump: it is a doctor, "
                 "the guardian, or a launcher still starting or already exiting; give the pid "
                 "of the ddprun that runs the workers (pgrep -a ddprun)\n",
                 pid);
    return 1;
  }
  if (kill(pid, DumpSignal()) != 0) {
    std::fprintf(stderr, "ddprun dump: signal %d: %s\n", pid, std::strerror(errno));
    return 1;
  }
  std::printf(
      "asked ddprun %d for a debug dump of its workers: it writes it under its attempt's "
      "dumps/ folder and prints the summary\n",
      pid);
  return 0;
}

}  // namespace ddprun::launcher
