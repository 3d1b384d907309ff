// Planning this host's worker CPU binding (--numa_binding, --cpu_binding):
// the machine's topology, the launcher's affinity mask and the NUMA node of
// each GPU, handed to env::PlanBinding.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/binding.hpp"
#include "launcher/launch_config.hpp"

namespace ddprun::launcher {

// The plan for `c.binding` and `c.nproc_per_node`. `gpu_bus_ids[i]` is the
// PCI bus id of visible GPU i, the one local rank i drives when i < nproc
// (sysfs or NVML spelling); nullopt or missing where unknown (no GPU discovery yet: env/binding.hpp
// says how ranks are placed then). The topology is read under `sysfs_root`.
// An empty plan for BindMode::kNone. kInvalidArgument from the planner;
// kUnavailable when the topology or the affinity mask cannot be read.
StatusOr<env::BindingPlan> PlanWorkerCpus(
    const LaunchConfig& c, const std::vector<std::optional<std::string>>& gpu_bus_ids,
    const std::string& sysfs_root = "/sys");

}  // namespace ddprun::launcher
