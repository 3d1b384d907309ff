#include "base/no_thread.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/format.hpp"
#include "base/user_threads.hpp"

namespace ddprun {
namespace {

std::string Limit(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : std::to_string(v); }

}  // namespace

std::string WhyNoThread() {
  rlimit nproc{}, as{}, stack{};
  getrlimit(RLIMIT_NPROC, &nproc);
  getrlimit(RLIMIT_AS, &as);
  getrlimit(RLIMIT_STACK, &stack);
  const std::string start = " (a thread could not be started: ";
  if (nproc.rlim_cur != RLIM_INFINITY && geteuid() != 0) {
    const std::vector<ProcessThreads> processes = UserProcesses(getuid());
    uint64_t threads = 0;
    for (const ProcessThreads& p : processes) threads += p.threads;
    if (threads + 16 >= nproc.rlim_cur) {
      std::string most;
      for (const ProcessThreads& p : TopThreadHolders(processes, 3)) {
        most += (most.empty() ? "; the most: pid " : ", pid ") + std::to_string(p.pid) + " (" +
                p.command + ") " + std::to_string(p.threads);
      }
      return start + "this user runs " + std::to_string(threads) +
             " threads, at RLIMIT_NPROC (ulimit -u: soft " + Limit(nproc.rlim_cur) + ", hard " +
             Limit(nproc.rlim_max) +
             "), which counts every thread of the user: raise it (ulimit -u), or stop what "
             "holds the threads" +
             most + ")";
    }
  }
  if (as.rlim_cur != RLIM_INFINITY) {
    const std::string each =
        stack.rlim_cur == RLIM_INFINITY
            ? std::string("")
            : ", each thread's stack " + FormatBytes(stack.rlim_cur) + " of it (ulimit -s)";
    return start + "RLIMIT_AS (ulimit -v) is " + FormatBytes(as.rlim_cur) + each +
           ": raise or lift ulimit -v" +
           (stack.rlim_cur != RLIM_INFINITY && stack.rlim_cur > (rlim_t{64} << 20)
                ? ", or lower ulimit -s"
                : "") +
           ")";
  }
  return start +
         "out of memory, or the cgroup's pids.max is reached; RLIMIT_NPROC (ulimit -u) "
         "is soft " +
         Limit(nproc.rlim_cur) + ", hard " + Limit(nproc.rlim_max) + ")";
}

}  // namespace ddprun
