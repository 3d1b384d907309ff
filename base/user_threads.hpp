// The user's processes and their threads, from /proc: what RLIMIT_NPROC
// counts (every thread whose real uid is the user's). Read by the start-up
// limit check (env/limits.hpp) and, when a thread could not be started, by
// WhyNoThread (base/no_thread.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun {

struct ProcessThreads {
  int pid = 0;
  uint64_t threads = 0;
  std::string command;  // the command line, cut to 80 characters
};

// The processes under `proc_root` whose real uid is `uid`, with their thread
// counts. Processes that vanish while being read are skipped.
std::vector<ProcessThreads> UserProcesses(uint32_t uid, const std::string& proc_root = "/proc");

// The `n` processes with the most threads, the most first (by pid among
// equals).
std::vector<ProcessThreads> TopThreadHolders(std::vector<ProcessThreads> processes, size_t n);

}  // namespace ddprun
