// LaunchConfig: everything the command line and PET_* variables say, parsed
// and validated once; passed down by const reference from main.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "env/binding.hpp"
#include "env/slurm.hpp"
#include "env/visible_gpus.hpp"

namespace ddprun::launcher {

// -r / -t: which of a worker's streams go to files: 1 stdout, 2 stderr, 3 both.
struct StreamSelection {
  int all = 0;                 // the value for ranks without their own entry
  std::map<int, int> by_rank;  // "0:1,1:2"
  int For(int local_rank) const {
    auto it = by_rank.find(local_rank);
    return it == by_rank.end() ? all : it->second;
  }
};

struct LaunchConfig {
  int nnodes_min = 1;
  int nnodes_max = 1;
  int nproc_per_node = 1;
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::map<std::string, std::string> rdzv_conf;
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval = 0.1;
  std::string start_method = "spawn";
  std::string role = "default";
  std::string event_log_handler = "null";  // null, json or console (launcher/machine_reports.hpp)
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;
  StreamSelection redirects;
  StreamSelection tee;
  std::set<int> local_ranks_filter;  // empty = every rank
  std::set<int> stdin_ranks{0};      // --stdin: local ranks that read ddprun's stdin
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  int node_rank = 0;
  bool node_rank_set = false;  // given explicitly (c10d honours it then)
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // unset: ddprun picks a free port
  std::string local_addr;
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  std::set<int> handled_signals;
  bool signals_given = false;  // --signals_to_handle (or PET_SIGNALS_TO_HANDLE) named them
  // Ignored when ddprun started and not handled: the workers start with them
  // ignored too (inherited_signals.hpp).
  std::set<int> workers_ignore;
  double shutdown_timeout = 30.0;
  bool virtual_local_rank = false;
  double hang_timeout = 0;     // seconds; 0 = off
  double startup_timeout = 0;  // seconds; 0 = off
  double exit_timeout = 0;     // seconds after removing the heartbeat file; 0 = none
  bool hang_detect_output = false;
  // --hang_detect=torch: the PyTorch progress hook (python/ddprun_torch) in every worker's
  // PYTHONPATH.
  bool hang_detect_torch = false;
  // CUDA_VISIBLE_DEVICES for every worker (--gpus, or Slurm's list where
  // CUDA_VISIBLE_DEVICES is unset); nullopt: the launcher's own, unchanged.
  std::optional<std::string> gpus;
  env::VisibleGpus visible_gpus;  // what the workers see, checked against the host
  // Per local rank, the PCI bus id of its GPU (env::LocalRankBusIds), for CPU binding.
  std::vector<std::optional<std::string>> gpu_bus_ids;
  int allowed_cpus = 1;         // CPUs this process may run on (env/cpus.hpp)
  int threads_per_worker = 64;  // --threads_per_worker: sizes the RLIMIT_NPROC check
  // The Slurm job step this agent is a task of, when --slurm is not off.
  std::optional<env::SlurmStep> slurm;
  // A Slurm job outside a step (a batch script), --slurm not off: the workers'
  // SLURM_PROCID and the like are rewritten as in a step (the batch's would
  // give every worker rank 0 in frameworks that read them).
  bool slurm_outside_step = false;
  // The options whose values came from the step ("master_addr", "nnodes", ...).
  std::set<std::string> from_slurm;
  // The cluster's ProctrackType (scontrol show config), read in a step; "" when unknown.
  std::string slurm_proctrack;
  env::BindMode binding = env::BindMode::kNone;  // --numa_binding or --cpu_binding
  // Each local rank's CPUs, planned from `binding` on this host (launcher/
  // cpu_binding.hpp) before the agent starts; empty: workers are not bound.
  std::vector<env::CpuList> worker_cpus;
  std::string program;
  std::vector<std::string> program_args;
};

}  // namespace ddprun::launcher
