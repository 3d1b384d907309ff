#include "env/gpus.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>

#include "env/names.hpp"

namespace ddprun::env {

namespace {

// The few NVML declarations ddprun uses, from NVML's documented ABI (nvml.h is
// not needed to build). nvmlReturn_t is an int enum; 0 is success.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kNvmlMigEnabled = 1;
constexpr unsigned kUuidBuffer = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kNameBuffer = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

struct NvmlPciInfo {  // nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

struct NvmlMemory {  // nvmlMemory_t (v1)
  unsigned long long total, free, used;
};

// Symbols resolved by dlsym; any may be null (an old or partial library).
struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*pci)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*mig_mode)(NvmlDevice, unsigned*, unsigned*) = nullptr;
  NvmlReturn (*mig_max)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*mig_handle)(NvmlDevice, unsigned, NvmlDevice*) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
};

template <typename Fn>
void Resolve(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
}

Nvml ResolveNvml(void* lib) {
  Nvml n;
  Resolve(lib, "nvmlInit_v2", n.init);
  Resolve(lib, "nvmlShutdown", n.shutdown);
  Resolve(lib, "nvmlDeviceGetCount_v2", n.count);
  Resolve(lib, "nvmlDeviceGetHandleByIndex_v2", n.handle);
  Resolve(lib, "nvmlDeviceGetUUID", n.uuid);
  Resolve(lib, "nvmlDeviceGetName", n.name);
  Resolve(lib, "nvmlDeviceGetPciInfo_v3", n.pci);
  Resolve(lib, "nvmlDeviceGetMemoryInfo", n.memory);
  Resolve(lib, "nvmlDeviceGetMigMode", n.mig_mode);
  Resolve(lib, "nvmlDeviceGetMaxMigDeviceCount", n.mig_max);
  Resolve(lib, "nvmlDeviceGetMigDeviceHandleByIndex", n.mig_handle);
  Resolve(lib, "nvmlErrorString", n.error_string);
  return n;
}

std::string ErrorText(const Nvml& n, const char* call, NvmlReturn r) {
  const char* text = n.error_string != nullptr ? n.error_string(r) : nullptr;
  return std::string(call) + ": " + (text != nullptr ? text : "error") + " (NVML error " +
         std::to_string(r) + ")";
}

// A string NVML writes into a buffer; "" when the call is missing or fails.
std::string BufferString(NvmlReturn (*fn)(NvmlDevice, char*, unsigned), NvmlDevice d,
                         unsigned size) {
  if (fn == nullptr) return "";
  std::string buf(size, '\0');
  if (fn(d, buf.data(), size) != kNvmlSuccess) return "";
  buf.resize(buf.find('\0') == std::string::npos ? size : buf.find('\0'));
  return buf;
}

std::vector<std::string> MigUuids(const Nvml& n, NvmlDevice d) {
  std::vector<std::string> out;
  unsigned max = 0;
  if (n.mig_max == nullptr || n.mig_handle == nullptr || n.mig_max(d, &max) != kNvmlSuccess) {
    return out;
  }
  for (unsigned i = 0; i < max; ++i) {
    NvmlDevice mig = nullptr;
    if (n.mig_handle(d, i, &mig) != kNvmlSuccess) continue;  // an empty slot: NOT_FOUND
    std::string uuid = BufferString(n.uuid, mig, kUuidBuffer);
    if (!uuid.empty()) out.push_back(uuid);
  }
  return out;
}

GpuDevice NvmlDeviceFacts(const Nvml& n, NvmlDevice d, int index, const std::string& sysfs) {
  GpuDevice g;
  g.index = index;
  g.uuid = BufferString(n.uuid, d, kUuidBuffer);
  g.name = BufferString(n.name, d, kNameBuffer);
  NvmlPciInfo pci{};
  if (n.pci != nullptr && n.pci(d, &pci) == kNvmlSuccess) {
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    g.pci_bus_id = NormalizeBusId(pci.bus_id);
    g.numa_node = ReadNumaNode(sysfs, g.pci_bus_id);
  }
  NvmlMemory memory{};
  if (n.memory != nullptr && n.memory(d, &memory) == kNvmlSuccess) g.memory_bytes = memory.total;
  unsigned current = 0, pending = 0;
  if (n.mig_mode != nullptr && n.mig_mode(d, &current, &pending) == kNvmlSuccess) {
    g.mig_enabled = current == kNvmlMigEnabled;
  }
  if (g.mig_enabled) g.mig_uuids = MigUuids(n, d);
  return g;
}

// Fills `out` from NVML; false (with out.note) when NVML cannot answer.
bool FromNvml(const GpuDiscoveryPaths& paths, GpuInventory& out) {
  std::unique_ptr<void, int (*)(void*)> lib(
      dlopen(paths.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL), dlclose);
  if (!lib) {
    const char* err = dlerror();
    out.note = err != nullptr ? err : paths.nvml_library + ": cannot load";
    return false;
  }
  out.library_loaded = true;
  const Nvml n = ResolveNvml(lib.get());
  for (auto [fn, symbol] : {std::pair{reinterpret_cast<void*>(n.init), "nvmlInit_v2"},
                            {reinterpret_cast<void*>(n.shutdown), "nvmlShutdown"},
                            {reinterpret_cast<void*>(n.count), "nvmlDeviceGetCount_v2"},
                            {reinterpret_cast<void*>(n.handle), "nvmlDeviceGetHandleByIndex_v2"}}) {
    if (fn == nullptr) {
      out.note = paths.nvml_library + ": no symbol " + symbol + " (NVML too old?)";
      return false;
    }
  }
  if (NvmlReturn r = n.init(); r != kNvmlSuccess) {
    out.note = ErrorText(n, "nvmlInit_v2", r);
    return false;
  }
  std::unique_ptr<const Nvml, void (*)(const Nvml*)> shutdown(
      &n, [](const Nvml* m) { (void)m->shutdown(); });
  unsigned count = 0;
  if (NvmlReturn r = n.count(&count); r != kNvmlSuccess) {
    out.note = ErrorText(n, "nvmlDeviceGetCount_v2", r);
    return false;
  }
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice d = nullptr;
    if (NvmlReturn r = n.handle(i, &d); r != kNvmlSuccess) {
      // A GPU NVML counts but cannot open (lost, no permission) still holds its index.
      GpuDevice lost;
      lost.index = static_cast<int>(i);
      lost.unusable = ErrorText(n, "nvmlDeviceGetHandleByIndex_v2", r);
      lost.name = "(" + lost.unusable + ")";
      out.devices.push_back(lost);
      continue;
    }
    out.devices.push_back(NvmlDeviceFacts(n, d, static_cast<int>(i), paths.sysfs_root));
  }
  out.source = GpuSource::kNvml;
  return true;
}

// The driver's own list: one directory per GPU, named by its bus id.
bool FromProcfs(const GpuDiscoveryPaths& paths, GpuInventory& out) {
  std::vector<std::string> buses;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(paths.proc_root + "/driver/nvidia/gpus", ec), end;
       !ec && it != end; it.increment(ec)) {
    buses.push_back(it->path().filename().string());
  }
  if (buses.empty()) return false;
  std::sort(buses.begin(), buses.end());
  for (const auto& bus : buses) {
    GpuDevice g;
    g.index = static_cast<int>(out.devices.size());
    g.pci_bus_id = NormalizeBusId(bus);
    g.numa_node = ReadNumaNode(paths.sysfs_root, g.pci_bus_id);
    std::ifstream in(paths.proc_root + "/driver/nvidia/gpus/" + bus + "/information");
    for (std::string line; std::getline(in, line);) {
      const size_t value = line.find_first_not_of(" \t", 6);
      if (line.rfind("Model:", 0) == 0 && value != std::string::npos) g.name = line.substr(value);
    }
    out.devices.push_back(g);
  }
  out.source = GpuSource::kProcfs;
  return true;
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

GpuDiscoveryPaths DiscoveryPaths(const Environ& environ) {
  GpuDiscoveryPaths paths;
  if (auto lib = Lookup(environ, kNvmlLibrary); lib && !lib->empty()) paths.nvml_library = *lib;
  return paths;
}

GpuInventory DiscoverGpus(const GpuDiscoveryPaths& paths) {
  GpuInventory inventory;
  if (FromNvml(paths, inventory)) return inventory;
  (void)FromProcfs(paths, inventory);
  return inventory;
}

std::string NormalizeBusId(const std::string& bus_id) {
  // DOMAIN:BUS:DEVICE.FUNCTION, hex digits only (sscanf alone would take "0x"); a domain
  // past ffff (Intel VMD) keeps its digits, as sysfs prints it.
  const bool hex_form = !bus_id.empty() && bus_id.size() <= 20 &&
                        bus_id.find_first_not_of("0123456789abcdefABCDEF:.") == std::string::npos;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  int used = 0;
  if (!hex_form ||
      std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &used) != 4 ||
      used != static_cast<int>(bus_id.size()) || bus > 0xff || device > 0x1f || function > 7) {
    return Lower(bus_id);
  }
  char out[16];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", domain, bus, device, function);
  return out;
}

std::optional<int> ReadNumaNode(const std::string& sysfs_root, const std::string& bus_id) {
  if (bus_id.empty()) return std::nullopt;
  std::ifstream in(sysfs_root + "/bus/pci/devices/" + bus_id + "/numa_node");
  int node = -1;
  if (!(in >> node) || node < 0) return std::nullopt;
  return node;
}

std::string DescribeGpus(const GpuInventory& inventory) {
  const size_t n = inventory.devices.size();
  if (n == 0) return "no GPU";
  std::string text = std::to_string(n) + (n == 1 ? " GPU: " : " GPUs: ");
  for (const auto& g : inventory.devices) {
    if (g.index != 0) text += ", ";
    text += std::to_string(g.index);
    if (!g.uuid.empty()) text += " " + g.uuid;
    if (!g.pci_bus_id.empty()) text += " (" + g.pci_bus_id + ")";
  }
  return text;
}

}  // namespace ddprun::env
