#include "launcher/cpu_binding.hpp"

#include "env/cpus.hpp"
#include "env/topology.hpp"

namespace ddprun::launcher {

StatusOr<env::BindingPlan> PlanWorkerCpus(
    const LaunchConfig& c, const std::vector<std::optional<std::string>>& gpu_bus_ids,
    const std::string& sysfs_root) {
  if (c.binding == env::BindMode::kNone) return env::BindingPlan{};
  const std::string what = env::BindModeName(c.binding);
  auto topology = env::ReadTopology(sysfs_root);
  if (!topology.ok()) {
    return Unavailable(what + ": reading the CPU topology: " + topology.status().message() +
                       ": drop the option to run unbound");
  }
  auto allowed = env::AffinityCpus();
  if (!allowed) {
    return Unavailable(what + ": sched_getaffinity failed: drop the option to run unbound");
  }
  env::BindingRequest req{c.binding, c.nproc_per_node, *allowed, {}};
  for (const auto& id : gpu_bus_ids) {
    req.gpu_nodes.push_back(id ? env::PciNumaNode(sysfs_root, *id) : std::nullopt);
  }
  return env::PlanBinding(*topology, req);
}

}  // namespace ddprun::launcher
