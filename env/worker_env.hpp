// Computing each worker's environment: torchrun 2.x's variables laid over the
// launcher's own environment (see reference torchrun.md section 2).
//
// Pure functions of their inputs; thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/environ.hpp"

namespace ddprun::env {

// What is common to every worker of one attempt on this node.
struct GroupInfo {
  std::string role = "default";
  std::string run_id = "none";
  int local_world_size = 1;
  int world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  int base_rank = 0;  // global rank of local rank 0
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  bool use_agent_store = false;
  std::string signals_to_handle;
  bool virtual_local_rank = false;
  // ddprun's --gpus: replaces CUDA_VISIBLE_DEVICES for every worker when set.
  std::optional<std::string> gpus;
  // The CPUs the launcher may run on (env/cpus.hpp): OMP_NUM_THREADS, when
  // the launcher's environment has none, shares them out.
  int allowed_cpus = 1;
  // The agent is a task of a Slurm job step (--slurm not off): each worker's
  // SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS and the like are
  // rewritten to its own rank, local rank, node rank and world, as if Slurm
  // had started it (the agent's values would give every worker the same rank).
  bool slurm_task = false;
  // Per local rank when workers are bound to CPUs (env/binding.hpp): the
  // OMP_NUM_THREADS default in place of the shared-out allowed CPUs.
  std::vector<int> bound_threads;
  // The file timer's named pipe (TORCHELASTIC_TIMER_FILE) when the launcher
  // serves one; "" leaves the variable as the launcher's environment has it.
  std::string timer_file;
  // --hang_detect=torch: the directory holding ddprun's sitecustomize.py, put
  // first on PYTHONPATH ("" leaves PYTHONPATH and the flight recorder alone).
  std::string torch_hook_dir;
  // With torch_hook_dir: NCCL_RAS_ADDR for the workers, unless the launcher's
  // environment sets it ("" leaves it alone).
  std::string nccl_ras_addr;
};

// One worker's own files (see LogLayout); each "" when logs go to /dev/null.
struct WorkerFiles {
  std::string error_file;      // TORCHELASTIC_ERROR_FILE
  std::string heartbeat_file;  // DDPRUN_HEARTBEAT_FILE
  std::string trace_file;      // DDPRUN_TRACE_FILE
  std::string dump_dir;        // DDPRUN_DUMP_DIR
  std::string torch_dir;       // DDPRUN_TORCH_DIR (with GroupInfo::torch_hook_dir only)
};

// The environment of local rank `local_rank`, given the launcher's environment
// `base` and the worker's files.
// Fails when --virtual_local_rank asks for more devices than are visible.
StatusOr<Environ> WorkerEnviron(const GroupInfo& group, int local_rank, const WorkerFiles& files,
                                const Environ& base);

// The comma-separated device list workers see, before per-worker narrowing:
// --gpus if given, else the launcher's CUDA_VISIBLE_DEVICES (if set).
std::optional<std::string> VisibleDevices(const GroupInfo& group, const Environ& base);

// Splits "a,b,c" on commas; an empty string gives no elements.
std::vector<std::string> SplitList(const std::string& s, char sep = ',');

}  // namespace ddprun::env
