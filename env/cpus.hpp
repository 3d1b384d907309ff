// The CPUs this process may run on: what sizes --nproc_per_node=cpu|auto, the
// default OMP_NUM_THREADS and the limit checks. Not every online CPU: taskset,
// a cgroup cpuset, a cgroup v2 CPU quota (cpu.max) and a Slurm step each allow
// fewer, and the smallest of them counts.
// Pure functions of their inputs except ReadCpuFacts; thread-compatible.
#pragma once

#include <optional>
#include <string>

#include "env/cpu_list.hpp"
#include "env/environ.hpp"

namespace ddprun::env {

// What the count is made of; each unset part limits nothing.
struct CpuFacts {
  int online = 1;               // sysconf(_SC_NPROCESSORS_ONLN)
  std::optional<int> affinity;  // CPUs in sched_getaffinity(0) (taskset, cpuset)
  // The tightest cgroup v2 cpu.max, or v1 cpu.cfs_quota_us and cpu.cfs_period_us: "QUOTA PERIOD".
  std::optional<std::string> cpu_max;
  std::optional<std::string> slurm_cpus;  // SLURM_CPUS_ON_NODE
};

// The CPUs allowed by `f`, at least 1: the minimum of the affinity count,
// ceil(QUOTA / PERIOD) of cpu.max ("max PERIOD" is no quota) and
// SLURM_CPUS_ON_NODE, else the online CPUs. A part that does not parse (a
// cpu.max line of another shape, a SLURM_CPUS_ON_NODE that is not a count
// >= 1) is ignored: these are the system's values, not the user's.
int AllowedCpus(const CpuFacts& f);

// The facts of this process: sched_getaffinity with a set sized for hosts of
// more than 1024 CPUs; cpu.max of this process's cgroup (from
// `proc_root`/self/cgroup, under `cgroup_root`) and of each cgroup above it,
// the tightest one kept; SLURM_CPUS_ON_NODE from `environ`.
CpuFacts ReadCpuFacts(const Environ& environ, const std::string& proc_root = "/proc");

// The CPUs in this process's affinity mask (sched_getaffinity); nullopt when
// it cannot be read.
std::optional<CpuList> AffinityCpus();

// AllowedCpus(ReadCpuFacts(environ)).
int AllowedCpuCount(const Environ& environ);

// OMP_NUM_THREADS for each of `workers` workers when the user set none: the
// allowed CPUs shared out, at least 1.
int DefaultOmpThreads(int cpus, int workers);

}  // namespace ddprun::env
