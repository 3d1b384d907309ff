#include "launcher/doctor_gpus.hpp"

#include <string>

namespace ddprun::launcher {

using env::CheckStatus;
using env::LimitCheck;

namespace {

std::string GiB(std::uint64_t bytes) {
  return std::to_string((bytes + (1ULL << 29)) >> 30) + " GiB";
}

// "NVIDIA H200, GPU-8a1b..., 0000:17:00.0, NUMA node 0, 141 GiB, MIG on: MIG-..."
std::string DeviceText(const env::GpuDevice& g) {
  std::string text = g.name.empty() ? "(name unknown)" : g.name;
  if (!g.uuid.empty()) text += ", " + g.uuid;
  if (!g.pci_bus_id.empty()) text += ", " + g.pci_bus_id;
  text += g.numa_node ? ", NUMA node " + std::to_string(*g.numa_node) : ", NUMA node unknown";
  if (g.memory_bytes) text += ", " + GiB(*g.memory_bytes);
  if (g.mig_enabled) {
    text += ", MIG on:";
    for (const auto& m : g.mig_uuids) text += " " + m;
    if (g.mig_uuids.empty()) text += " no instance";
  }
  return text;
}

LimitCheck InventoryCheck(const env::GpuInventory& inv) {
  const std::string count = std::to_string(inv.devices.size());
  switch (inv.source) {
    case env::GpuSource::kNvml:
      return {"GPUs", CheckStatus::kOk,
              inv.devices.empty() ? "none (NVML lists no GPU; CPU jobs: Gloo)" : count + " (NVML)",
              ""};
    case env::GpuSource::kProcfs:
      return {"GPUs", CheckStatus::kWarn,
              count + " in /proc/driver/nvidia/gpus, but no NVML: " + inv.note,
              "CUDA needs the driver's user-space libraries too: install them (libnvidia-ml.so.1, "
              "libcuda.so.1) matching the loaded kernel module"};
    case env::GpuSource::kNone:
      break;
  }
  if (inv.library_loaded) {
    return {"GPUs", CheckStatus::kWarn, "none: no NVML: " + inv.note,
            "check the NVIDIA driver (nvidia-smi); after a driver upgrade, reboot"};
  }
  return {"GPUs", CheckStatus::kOk, "none: no NVML: " + inv.note + " (CPU jobs: Gloo)", ""};
}

LimitCheck VisibleCheck(const env::GpuInventory& inv, const env::VisibleGpus& visible) {
  const std::string source = env::VisibleSourceText(visible);
  if (!visible.checked) return {"visible GPUs", CheckStatus::kOk, source + ": not checked", ""};
  std::string list;
  for (const auto& g : visible.gpus) {
    list += list.empty() ? "" : ",";
    list += g.mig_uuid ? *g.mig_uuid : (g.device < 0 ? "?" : std::to_string(g.device));
  }
  LimitCheck c{"visible GPUs", CheckStatus::kOk,
               std::to_string(visible.gpus.size()) + " of " + std::to_string(inv.devices.size()) +
                   (list.empty() ? "" : " (" + list + ")") + " from " + source,
               ""};
  for (const auto& w : visible.warnings) {
    c.status = CheckStatus::kWarn;
    c.fix += (c.fix.empty() ? "" : "; ") + w;
  }
  return c;
}

}  // namespace

std::vector<LimitCheck> GpuChecks(const env::GpuInventory& inventory,
                                  const env::VisibleGpus& visible) {
  std::vector<LimitCheck> out{InventoryCheck(inventory)};
  for (const auto& g : inventory.devices) {
    LimitCheck c{"GPU " + std::to_string(g.index), CheckStatus::kOk, DeviceText(g), ""};
    if (!g.unusable.empty()) {
      c.status = CheckStatus::kWarn;
      c.fix = "NVML cannot open this GPU, and CUDA will not use it: nvidia-smi -q -i " +
              std::to_string(g.index) +
              " and the kernel log (dmesg: Xid) say why; a GPU lost from the bus needs a reset "
              "(nvidia-smi -r) or a reboot; leave it out with --gpus or CUDA_VISIBLE_DEVICES";
    } else if (g.mig_enabled && g.mig_uuids.empty()) {
      c.status = CheckStatus::kWarn;
      c.fix =
          "MIG is on but has no instance, so CUDA sees no device on this GPU: create "
          "instances (nvidia-smi mig -cgi PROFILES -C -i " +
          std::to_string(g.index) + ") or turn MIG off (nvidia-smi -i " + std::to_string(g.index) +
          " -mig 0, then reset the GPU)";
    }
    out.push_back(c);
  }
  out.push_back(VisibleCheck(inventory, visible));
  return out;
}

}  // namespace ddprun::launcher
