// ddprun doctor's GPU lines: each GPU of the host as NVML lists it (index,
// name, UUID, bus id, NUMA node, memory, MIG instances), or why none is
// known, and the GPUs the workers would see.
#pragma once

#include <vector>

#include "env/gpus.hpp"
#include "env/limits.hpp"
#include "env/visible_gpus.hpp"

namespace ddprun::launcher {

std::vector<env::LimitCheck> GpuChecks(const env::GpuInventory& inventory,
                                       const env::VisibleGpus& visible);

}  // namespace ddprun::launcher
