// What the launcher knows about a failed group that the failed worker's text
// does not, for the failure report's diagnosis (supervisor/explain.hpp):
// noted when the group starts and when it fails, the rest read when the
// failure is reported (limits, /dev/shm, free space, interfaces, memory).
//
// Not thread-safe: the agent's thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "env/environ.hpp"
#include "env/memory.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/program.hpp"
#include "supervisor/explain.hpp"
#include "supervisor/failure_report.hpp"
#include "supervisor/supervisor.hpp"
#include "supervisor/worker_spec.hpp"

namespace ddprun::launcher {

// Whether the workers run a shell (sh, bash, dash, zsh, ksh by name, or a
// script whose #! line names one), whose exit code 128+N says that a command
// it ran died of signal N.
bool RunsAShell(const Program& program);

class FailureFacts {
 public:
  // Before a group starts: the OOM kill counts to compare with, and which
  // workers write a stream straight into a log file (not through ddprun).
  void GroupStarting(const std::vector<supervisor::WorkerSpec>& specs);
  // After a group failed: `root` is its root cause, `world_size` the job's.
  void GroupFailed(int world_size, const supervisor::GroupResult& result,
                   const supervisor::FailureRecord& root);
  // Whether a worker of the group running or last run wrote a stream of its
  // own straight into a log file (--redirects without --tee): ddprun cannot
  // see its writes fail.
  bool AnyWritesOwnLogs() const;
  // The context as it is now; `run_dir` is the run's log directory ("" none).
  supervisor::ExplainContext Context(const LaunchConfig& c, const Program& program,
                                     const env::Environ& environ, const std::string& run_dir) const;

 private:
  env::MemoryFacts memory_at_start_;
  // The job is this host's workers only, and every other one was still
  // running when the root cause failed (ddprun stopped them).
  bool peers_running_ = false;
  int unasked_signal_ = 0;   // the root cause's death signal, when ddprun did not send it
  bool multi_node_ = false;  // the failed group spanned other hosts too
  int root_code_ = 0;        // the root cause's exit code (0: a signal, a hang or a timer)
  std::vector<bool> writes_own_logs_;       // by local rank, for the group running or last run
  std::map<int, std::string> trace_files_;  // rank -> its DDPRUN_TRACE_FILE, same group
  std::string never_entered_;               // ExplainContext::never_entered
  std::string torch_dir_;                   // the hook's DDPRUN_TORCH_DIR, same group
  std::vector<int> ranks_;                  // the group's ranks on this host
  std::string torch_laggards_;              // ExplainContext::torch_laggards
  std::string diverged_;                    // ExplainContext::diverged
  std::string stopped_;                     // ExplainContext::stopped
  bool root_writes_own_logs_ = false;
  std::vector<int> finished_ranks_;     // ExplainContext::finished_ranks
  double finished_seconds_before_ = 0;  // ExplainContext::finished_seconds_before
};

}  // namespace ddprun::launcher
