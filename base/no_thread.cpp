#include "base/no_thread.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/format.hpp"
#include "base/read_file.hpp"

namespace ddprun {
namespace {

// The threads of the processes whose /proc entry the effective user owns.
uint64_t UserThreads() {
  uint64_t threads = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  const uid_t me = geteuid();
  while (const dirent* e = readdir(proc)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || st.st_uid != me) continue;
    const std::string stat_text = ReadSmallFile(dir + "/stat", 4096);
    // Field 20, num_threads, counted after the command's closing parenthesis.
    size_t at = stat_text.rfind(')');
    for (int field = 2; at != std::string::npos && field < 20; ++field) {
      at = stat_text.find(' ', at + 1);
    }
    if (at != std::string::npos) threads += std::strtoull(stat_text.c_str() + at + 1, nullptr, 10);
  }
  closedir(proc);
  return threads;
}

std::string Limit(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : std::to_string(v); }

}  // namespace

std::string WhyNoThread() {
  rlimit nproc{}, as{}, stack{};
  getrlimit(RLIMIT_NPROC, &nproc);
  getrlimit(RLIMIT_AS, &as);
  getrlimit(RLIMIT_STACK, &stack);
  const std::string start = " (a thread could not be started: ";
  if (nproc.rlim_cur != RLIM_INFINITY && geteuid() != 0) {
    const uint64_t threads = UserThreads();
    if (threads + 16 >= nproc.rlim_cur) {
      return start + "this user runs " + std::to_string(threads) +
             " threads, at RLIMIT_NPROC (ulimit -u: soft " + Limit(nproc.rlim_cur) + ", hard " +
             Limit(nproc.rlim_max) +
             "), which counts every thread of the user: raise it (ulimit -u), or stop what "
             "holds the threads)";
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
