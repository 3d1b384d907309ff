// A Slurm job step as one of its tasks sees it: the SLURM_* variables
// slurmstepd sets for every task of `srun ... ddprun ...`.
//
// ddprun reads a step to fill in what the user did not say (--nnodes,
// --node_rank, the store's host and port, --rdzv_id; launcher/options.cpp) and
// to refuse the classic mistakes (several agents per node). Outside a step
// (no SLURM_STEP_ID: a plain shell, an sbatch batch script, salloc) there is
// nothing to read.
//
// Pure functions of their inputs; thread-compatible.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.hpp"
#include "env/environ.hpp"

namespace ddprun::env {

struct SlurmStep {
  std::string job_id;               // SLURM_JOB_ID
  std::string step_id;              // SLURM_STEP_ID
  int num_nodes = 1;                // SLURM_STEP_NUM_NODES
  int node_id = 0;                  // SLURM_NODEID: this node's index in `nodelist`
  int num_tasks = 1;                // SLURM_STEP_NUM_TASKS: agents in the step
  std::vector<int> tasks_per_node;  // SLURM_STEP_TASKS_PER_NODE, one entry per node
  std::string nodelist;             // SLURM_STEP_NODELIST, as given
  std::string first_host;           // its first host: node 0 of the step
  std::string node_name;            // SLURMD_NODENAME ("" when unset)
  int restart_count = 0;            // SLURM_RESTART_COUNT: times the job was requeued

  // "JOB.STEP": the step's name in Slurm's messages, and the default run id.
  std::string Id() const { return job_id + "." + step_id; }
  // Tasks (ddprun agents) Slurm started on this node.
  int TasksOnThisNode() const;
};

// The step this process is a task of; nullopt outside a step. A step whose
// variables do not parse is kInvalidArgument naming the variable (Slurm sets
// them, so this is a broken or hand-made environment).
StatusOr<std::optional<SlurmStep>> ReadSlurmStep(const Environ& environ);

// SLURM_STEP_TASKS_PER_NODE's form, one count per node: "2(x3),1" is 2,2,2,1.
StatusOr<std::vector<int>> ExpandTasksPerNode(std::string_view text);

// The store port of a multi-node step when the user names none: the same on
// every node of the step, different for most pairs of jobs and steps, and
// below the usual ephemeral range (32768+), so that outgoing connections do not
// hold it: 20000 + (a hash of "JOB.STEP") % 10000.
int SlurmStepPort(const SlurmStep& step);

// Slurm's KillWait in seconds from `scontrol show config` output ("KillWait
// = 30 sec"); nullopt when the text has no such line.
std::optional<int> ParseKillWait(std::string_view text);

// NodeAddr=... of a `scontrol show node -o` line; nullopt when absent.
std::optional<std::string> ParseNodeAddr(std::string_view text);

// Where Slurm reaches node `name` (its NodeAddr, from `scontrol show node`,
// bounded to 5 s): for node names that do not resolve (NodeName=n1
// NodeAddr=10.1.0.1). nullopt when scontrol is missing, fails or says nothing.
std::optional<std::string> ReadNodeAddr(const std::string& name);

// What ddprun needs of the cluster's configuration.
struct SlurmConfig {
  std::optional<int> kill_wait;  // KillWait, seconds
  std::string proctrack;         // ProctrackType, e.g. "proctrack/cgroup"; "" when unknown
  std::string unread;            // why the configuration was not read; "" when it was
};

// The fields above from `scontrol show config` output ("Key = value" lines).
SlurmConfig ParseSlurmConfig(std::string_view text);

// `scontrol show config`, parsed (bounded to 5 s); empty fields when scontrol
// is not on PATH, fails or says nothing about them (`unread` says which).
SlurmConfig ReadSlurmConfig();

// Whether slurmstepd, signalling a step (scancel -s, the time limit, srun
// forwarding a signal), reaches every process the step's tasks started, the
// workers of ddprun included: the proctrack plugins that track all descendants
// (cgroup, linuxproc) do; pgid signals the task's process group only, which
// ddprun's workers leave.
bool SignalsReachDescendants(const std::string& proctrack);

// Whether `pid` is a slurmstepd among this process's ancestors: the step's own
// daemon (by /proc/<pid>/comm and the chain of parents).
bool IsAncestorSlurmstepd(pid_t pid);

}  // namespace ddprun::env
