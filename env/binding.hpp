// Which CPUs each local worker is bound to: --numa_binding (torchrun's modes,
// as torch/numa/binding.py computes them) and --cpu_binding (ddprun's
// disjoint shares). A pure function of the topology, the CPUs this process
// may use, the worker count and where each worker's GPU is; the launcher
// applies the result in each worker before exec (supervisor/spawn.hpp).
// Thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/cpu_list.hpp"
#include "env/topology.hpp"

namespace ddprun::env {

enum class BindMode {
  kNone,  // workers inherit the launcher's affinity
  // --numa_binding (torchrun): every CPU of the GPU's NUMA node; of every
  // node of its socket; an exclusive run of whole cores of its node, split
  // among the node's GPUs; one L3 complex of its node.
  kNumaNode,
  kNumaSocket,
  kNumaExclusive,
  kNumaCoreComplex,
  // --cpu_binding (ddprun): disjoint shares of the allowed CPUs.
  kSpread,   // ranks balanced over NUMA nodes, each share within one node
  kCompact,  // equal runs of the CPUs in topology order, filled from the first
};

// "--numa_binding=node", "--cpu_binding=spread", "none".
std::string BindModeName(BindMode mode);

struct BindingRequest {
  BindMode mode = BindMode::kNone;
  int nproc = 1;
  CpuList allowed;  // the launcher's own affinity mask: no plan leaves it
  // The NUMA node of GPU i, which local rank i drives (as in torchrun, where
  // the GPU index is the local rank); nullopt or missing: unknown. Entries at
  // nproc and beyond are GPUs no local rank drives: --numa_binding=exclusive
  // and core-complex count them when splitting a node, as torchrun does.
  // -1, a node the firmware does not give, counts as node 0, as in torchrun.
  std::vector<std::optional<int>> gpu_nodes;
};

struct BindingPlan {
  std::vector<CpuList> ranks;         // per local rank; empty for kNone
  std::vector<std::string> notes;     // how the plan was made, for the info log
  std::vector<std::string> warnings;  // ranks that share CPUs
};

// The CPUs of each local rank; every set is non-empty and within
// `req.allowed`. --cpu_binding sets are disjoint whenever there are at least
// as many allowed CPUs as ranks; with fewer, rank r gets the (r mod N)-th
// CPU and the plan warns. kInvalidArgument, saying what to change, when a
// --numa_binding rank would get no CPU (its node has none of the allowed
// CPUs; exclusive with fewer cores than GPUs on the node), or when no CPU is
// allowed at all.
StatusOr<BindingPlan> PlanBinding(const Topology& topology, const BindingRequest& req);

// OMP_NUM_THREADS for each rank of `ranks` (a plan's): its CPUs divided by
// the ranks bound to the very same CPUs (--numa_binding=node gives a node's
// ranks one set), at least 1.
std::vector<int> ThreadsPerRank(const std::vector<CpuList>& ranks);

// "local rank 0: 0-3, local rank 1: 4-7".
std::string DescribePlan(const BindingPlan& plan);

}  // namespace ddprun::env
