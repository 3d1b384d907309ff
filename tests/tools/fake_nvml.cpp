// A fake NVML (libfake_nvml.so) for the end-to-end tests: the dozen symbols
// ddprun resolves (env/gpus.cpp), over GPUs described by the environment.
// Point DDPRUN_NVML_LIBRARY at it.
//
//   FAKE_NVML_DEVICES    comma list of UUID:BUSID[+MIG-UUID...], e.g.
//                        "GPU-aaaa:0000:17:00.0,GPU-bbbb:0000:65:00.0+MIG-1111+MIG-2222"
//                        (a GPU with MIG instances has MIG mode on, as has one
//                        written "UUID:BUSID+", without any); unset: no GPU
//   FAKE_NVML_NAME       every GPU's name (default "Fake GPU")
//   FAKE_NVML_INIT_ERROR nvmlInit_v2 returns this NVML error code instead of 0
//   FAKE_NVML_LOST       comma list of GPU indices whose handle NVML cannot
//                        give: "GPU is lost" (error 15), as for a GPU off the bus
//
// Bus ids come back as NVML gives them: an eight-digit domain in upper case.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kNotFound = 6;
constexpr int kInsufficientSize = 7;
constexpr int kGpuIsLost = 15;
constexpr unsigned kMaxMig = 7;

struct Device {
  std::string uuid;
  std::string bus_id;  // NVML form
  std::vector<Device*> migs;
  bool is_mig = false;
  bool mig_on = false;  // MIG mode (with or without instances)
};

std::deque<Device> g_devices;  // stable addresses: handles point into it
std::vector<Device*> g_gpus;
bool g_initialized = false;

std::string NvmlBusId(const std::string& sysfs) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(sysfs.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
    return sysfs;
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%08X:%02X:%02X.%X", domain, bus, device, function);
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (!s.empty()) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

void Load() {
  g_devices.clear();
  g_gpus.clear();
  const char* spec = std::getenv("FAKE_NVML_DEVICES");
  for (const auto& entry : Split(spec != nullptr ? spec : "", ',')) {
    auto parts = Split(entry, '+');
    const size_t colon = parts[0].find(':');
    Device& gpu = g_devices.emplace_back();
    gpu.uuid = parts[0].substr(0, colon);
    gpu.bus_id = colon == std::string::npos ? "" : NvmlBusId(parts[0].substr(colon + 1));
    g_gpus.push_back(&gpu);
    gpu.mig_on = parts.size() > 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      if (parts[i].empty()) continue;  // "GPU-x:BUS+": MIG on, no instance
      Device& mig = g_devices.emplace_back();
      mig.uuid = parts[i];
      mig.is_mig = true;
      gpu.migs.push_back(&mig);
    }
  }
}

int CopyOut(const std::string& s, char* buf, unsigned length) {
  if (buf == nullptr) return kInvalidArgument;
  if (s.size() + 1 > length) return kInsufficientSize;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return kSuccess;
}

Device* AsDevice(void* handle) { return static_cast<Device*>(handle); }

}  // namespace

extern "C" {

struct FakePciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

struct FakeMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};

__attribute__((visibility("default"))) int nvmlInit_v2() {
  if (const char* err = std::getenv("FAKE_NVML_INIT_ERROR")) return std::atoi(err);
  Load();
  g_initialized = true;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlShutdown() {
  if (!g_initialized) return kUninitialized;
  g_initialized = false;
  return kSuccess;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(int result) {
  switch (result) {
    case kSuccess:
      return "Success";
    case 9:
      return "Driver Not Loaded";
    case kGpuIsLost:
      return "GPU is lost";
    case 18:
      return "RM has detected an NVML/RM version mismatch.";
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!g_initialized) return kUninitialized;
  *count = static_cast<unsigned>(g_gpus.size());
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                                         void** device) {
  if (!g_initialized) return kUninitialized;
  if (index >= g_gpus.size()) return kInvalidArgument;
  const char* lost = std::getenv("FAKE_NVML_LOST");
  for (const auto& i : Split(lost != nullptr ? lost : "", ',')) {
    if (!i.empty() && std::strtoul(i.c_str(), nullptr, 10) == index) return kGpuIsLost;
  }
  *device = g_gpus[index];
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetUUID(void* device, char* uuid,
                                                             unsigned length) {
  return CopyOut(AsDevice(device)->uuid, uuid, length);
}

__attribute__((visibility("default"))) int nvmlDeviceGetName(void* device, char* name,
                                                             unsigned length) {
  const char* fake = std::getenv("FAKE_NVML_NAME");
  std::string text = fake != nullptr ? fake : "Fake GPU";
  if (AsDevice(device)->is_mig) text += " MIG";
  return CopyOut(text, name, length);
}

__attribute__((visibility("default"))) int nvmlDeviceGetPciInfo_v3(void* device, FakePciInfo* pci) {
  Device* d = AsDevice(device);
  if (d->is_mig || d->bus_id.empty()) return kNotSupported;
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->bus_id, sizeof(pci->bus_id), "%s", d->bus_id.c_str());
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void*, FakeMemory* memory) {
  memory->total = 80ULL << 30;
  memory->used = 0;
  memory->free = memory->total;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMigMode(void* device, unsigned* current,
                                                                unsigned* pending) {
  if (!AsDevice(device)->mig_on) return kNotSupported;
  *current = *pending = 1;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMaxMigDeviceCount(void* device,
                                                                          unsigned* count) {
  if (!AsDevice(device)->mig_on) return kNotSupported;
  *count = kMaxMig;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMigDeviceHandleByIndex(void* device,
                                                                               unsigned index,
                                                                               void** mig) {
  Device* d = AsDevice(device);
  if (index >= d->migs.size()) return kNotFound;
  *mig = d->migs[index];
  return kSuccess;
}

}  // extern "C"
