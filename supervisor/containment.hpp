// Containment: every process a worker starts, however it detaches (its own
// children, double forks, setsid, a cleared environment), dies with the job;
// also when the launcher itself is SIGKILLed.
//
// The launcher is a child subreaper: an orphan anywhere below it becomes its
// child, so while it lives the whole job is one tree under it. Teardown kills
// that tree (all but the launcher's own session, where only its helpers run:
// every worker starts a session of its own, and no descendant can rejoin the
// launcher's), then, the first that works of:
//  - a cgroup v2 of the job's own (created under the launcher's cgroup when
//    it may create one): workers join it before exec; cgroup.kill ends all
//    of it at once, with exact membership;
//  - a mark in the environment (DDPRUN_PROCESS_TREE=<token>, unique per
//    run) that descendants inherit: a sweep of /proc kills every process
//    carrying it.
// A guardian process (ddprun re-executed as job-guardian, in a session of its
// own, named so that `pkill -9 [-f] ddprun` spares it) waits on a
// pipe the launcher holds and on which it names every worker it starts: when
// the launcher dies without saying goodbye, the guardian kills what is left
// (the cgroup, the marked processes, and every process in a worker's
// session) and exits. Only a process that both clears its environment and
// starts a session of its own escapes it, and only when there is no cgroup.
//
// Signals go through pidfds, so a pid that was reused is never signalled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "base/unique_fd.hpp"
#include "env/names.hpp"

namespace ddprun::supervisor {

class Containment {
  struct Key {
    explicit Key() = default;
  };

 public:
  explicit Containment(Key);
  // Creates the job's cgroup (when `try_cgroup` and allowed) and starts the
  // guardian. Fails only when the guardian cannot be started.
  static StatusOr<std::unique_ptr<Containment>> Create(bool try_cgroup);
  // Kills what is left, removes the cgroup, and dismisses the guardian.
  ~Containment();
  Containment(const Containment&) = delete;
  Containment& operator=(const Containment&) = delete;

  // "DDPRUN_PROCESS_TREE=<token>", for every worker's environment.
  const std::string& env_entry() const { return env_entry_; }
  // The job cgroup's cgroup.procs, open for writing; -1 without a cgroup.
  int cgroup_procs_fd() const { return procs_.get(); }
  // The job cgroup's directory; empty without one.
  const std::string& cgroup_dir() const { return cgroup_dir_; }
  // How processes are contained, for the log.
  std::string Describe() const;

  // Kills every process of the job that is still alive and waits up to
  // `wait` for them to be gone; the launcher's children that exited are
  // reaped, but those in `spare` (the workers, read without reaping). Returns
  // how many it signalled (the cgroup's count before the kill, or the sweep's).
  int KillAll(std::chrono::milliseconds wait, std::vector<pid_t> spare = {});

  // Tells the guardian about a worker just started (its session is the
  // job's); never blocks: a guardian that stopped reading misses it.
  void Track(pid_t worker);
  // Reaps the children that became the launcher's as orphans and have exited
  // (not the workers in `keep`, which the supervisor reaps itself, nor the
  // launcher's own helpers). Returns how many it reaped.
  int ReapAdopted(std::vector<pid_t> keep);

 private:
  // Spawns the guardian (guardian_, guardian_pipe_).
  Status StartGuardian();
  // Starts another when the guardian has died, and tells it the `workers`.
  void ReplaceDeadGuardian(const std::vector<pid_t>& workers);

  std::string token_;
  std::string env_entry_;
  std::string cgroup_dir_;
  UniqueFd procs_;
  UniqueFd guardian_pipe_;  // write end; the guardian sees EOF when we die
  pid_t guardian_ = -1;
  bool guardian_seen_ = false;  // looked at once, when the first worker started
};

// Kills every live process whose environment holds `env_entry` (the first
// environment entry or one after a NUL), repeating until none is left or
// `wait` passed. Returns how many processes were signalled.
int SweepMarkedProcesses(const std::string& env_entry, std::chrono::milliseconds wait);

// Kills every live process below this one (it is a subreaper, so orphans of
// the job are below it too) except those in `spare` and in this process's own
// session, repeating until none is left or `wait` passed; its children that
// exited meanwhile are reaped, but `spare`. Returns how many processes were
// signalled.
int KillDescendants(const std::vector<pid_t>& spare, std::chrono::milliseconds wait);

// Reaps the exited children of this process that are not in its own session
// (so not its helpers: the job's orphans it adopted as a subreaper), but none
// in `keep`. Returns how many it reaped.
int ReapOrphans(const std::vector<pid_t>& keep);

// cgroup.kill on `dir`, then waits up to `wait` for it to be empty. Returns
// how many processes it held before, or -1 when cgroup.kill failed.
int KillCgroup(const std::string& dir, std::chrono::milliseconds wait);

// The guardian's main: argv is {kGuardianName, kGuardianArg, token}, the
// job's cgroup (if any) in kGuardianCgroupEnv, the launcher's pipe on fd 3.
// ddprun's main calls it when argv[1] is kGuardianArg. No name of the
// guardian's holds "ddprun": the usual ways to kill a job by name spare it.
inline constexpr const char* kGuardianName = "job-guardian";
inline constexpr const char* kGuardianArg = "__job_guardian__";
inline constexpr const char* kGuardianCgroupEnv = "DDPRUN_GUARDIAN_CGROUP";
int RunGuardian(int argc, char** argv);

}  // namespace ddprun::supervisor
