#include "launcher/dump_request.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "base/parse.hpp"

namespace ddprun::launcher {

namespace {

std::string Comm(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// The ddprun processes of this user other than this one.
std::vector<int> RunningLaunchers() {
  std::vector<int> pids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    if (Comm(pid) == "ddprun") pids.push_back(pid);
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
                   "ddprun dump: %zu ddprun processes are running: give the pid, e.g. "
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
  if (Comm(pid) != "ddprun") {
    std::fprintf(stderr, "ddprun dump: process %d is not a running ddprun\n", pid);
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
