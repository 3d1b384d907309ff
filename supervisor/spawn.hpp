// Starting one worker process (Boost.Process), and signalling process groups.
//
// The child, between fork and exec, only sets itself up: the job's cgroup
// (when there is one), its CPU affinity (when bound), its own process
// group (so a kill reaches its children too), a parent-death SIGKILL (so no
// worker outlives a SIGKILLed launcher), default signal dispositions and an
// empty signal mask, the three standard descriptors, and close-on-exec on
// every other descriptor (so none leaks into the worker).
#pragma once

#include <signal.h>

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.hpp"
#include "supervisor/group_state.hpp"

namespace ddprun::supervisor {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is a path to an executable file
  std::vector<std::string> envp;  // "NAME=value"
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int cgroup_procs_fd = -1;  // the child joins this cgroup first, when >= 0
  // The child's CPUs (sched_setaffinity before exec, so every thread of the
  // worker inherits them); empty: the launcher's own. A failure there (a CPU
  // gone offline since the plan) leaves the launcher's mask.
  std::vector<int> cpus;
  // Signals the child starts with ignored (inherited by the launcher that way);
  // every other one starts at its default. nullptr: none.
  const sigset_t* ignored = nullptr;
};

// Starts the worker; its pid is also its process group id. An exec failure
// comes back as a Status naming the program and the errno, with code
// kNotFound or kPermissionDenied where those apply. EAGAIN from fork is
// reported as the process/thread limit it almost always is.
StatusOr<pid_t> SpawnWorker(const SpawnRequest& request);

class PosixProcessControl : public ProcessControl {
 public:
  // killpg(); a group that is already gone is not an error.
  void SignalGroup(pid_t pgid, int sig) override;
  char StoppedState(pid_t pid) override;
};

}  // namespace ddprun::supervisor
