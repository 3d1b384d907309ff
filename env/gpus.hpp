// The NVIDIA GPUs of this host, as the driver's management library (NVML)
// lists them: index, UUID, name, PCI bus id, NUMA node, memory, MIG instances.
//
// NVML is loaded at run time (dlopen of libnvidia-ml.so.1, never linked), so
// ddprun runs on hosts without a driver. No library, or a library whose
// nvmlInit fails, is not an error: the inventory is then empty and says why.
// Where NVML gives nothing but the driver lists GPUs under
// /proc/driver/nvidia/gpus, those give index, bus id and model name (no UUID):
// enough to count and check indices, as ddprun did before NVML.
//
// NVML numbers GPUs in PCI bus order; CUDA does too with
// CUDA_DEVICE_ORDER=PCI_BUS_ID, and by default (fastest first) whenever the
// GPUs are all of one model, which is the case on training nodes.
//
// DiscoverGpus is thread-compatible; it calls nvmlInit_v2/nvmlShutdown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "env/environ.hpp"

namespace ddprun::env {

struct GpuDevice {
  int index = 0;
  std::string uuid;        // "GPU-8a1b..."; "" when unknown (from /proc)
  std::string name;        // "NVIDIA H200"
  std::string pci_bus_id;  // sysfs form, "0000:17:00.0"; "" when unknown
  std::optional<int> numa_node;
  std::optional<std::uint64_t> memory_bytes;
  bool mig_enabled = false;
  std::vector<std::string> mig_uuids;  // "MIG-..." of its MIG instances
  // Why NVML could not open it (lost, no permission); "" when it could.
  std::string unusable;
};

enum class GpuSource {
  kNone,    // nothing known: `note` says why
  kNvml,    // NVML answered (possibly with 0 GPUs)
  kProcfs,  // NVML did not; /proc/driver/nvidia/gpus did (no UUIDs)
};

struct GpuInventory {
  GpuSource source = GpuSource::kNone;
  std::vector<GpuDevice> devices;  // by index
  // Why NVML gave nothing: "libnvidia-ml.so.1: cannot open shared object
  // file: No such file or directory", "nvmlInit_v2: Driver Not Loaded".
  std::string note;
  // The library loaded (its nvmlInit or a later call failed if `note` is set):
  // a driver problem rather than a host without NVIDIA's driver.
  bool library_loaded = false;
};

// Where discovery looks: real paths unless a test says otherwise.
struct GpuDiscoveryPaths {
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string sysfs_root = "/sys";  // <root>/bus/pci/devices/<bus id>/numa_node
  std::string proc_root = "/proc";  // <root>/driver/nvidia/gpus/<bus id>/information
};

// The default paths, with the library from DDPRUN_NVML_LIBRARY when set (a
// test hook: the end-to-end tests point it at a fake NVML).
GpuDiscoveryPaths DiscoveryPaths(const Environ& environ);

GpuInventory DiscoverGpus(const GpuDiscoveryPaths& paths);

// NVML's "00000000:17:00.0" (8-digit domain, upper case) in sysfs form,
// "0000:17:00.0"; a text that is no bus id comes back lower-cased.
std::string NormalizeBusId(const std::string& bus_id);

// <sysfs_root>/bus/pci/devices/<bus_id>/numa_node; nullopt when missing or -1.
std::optional<int> ReadNumaNode(const std::string& sysfs_root, const std::string& bus_id);

// "1 GPU: 0 GPU-8a1b... (0000:17:00.0)" or "no GPU", for messages.
std::string DescribeGpus(const GpuInventory& inventory);

}  // namespace ddprun::env
