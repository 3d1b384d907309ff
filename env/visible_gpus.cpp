#include "env/visible_gpus.hpp"

#include <algorithm>
#include <cctype>

#include "base/parse.hpp"
#include "env/names.hpp"
#include "env/worker_env.hpp"

namespace ddprun::env {

namespace {

// One entry of a device list, matched against the inventory.
struct EntryMatch {
  std::string entry;
  std::optional<VisibleGpu> gpu;  // nullopt: names no device
  std::string why;                // when gpu is nullopt and there is more to say
  bool device_form = false;       // an index or a GPU-/MIG- UUID (not "-1", "NoDevFiles")
};

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A unique prefix of a GPU UUID (CUDA accepts those), or of a MIG UUID.
void MatchUuid(const GpuInventory& inv, EntryMatch& m) {
  const bool mig = StartsWith(m.entry, "MIG-");
  if (inv.source != GpuSource::kNvml) {  // /proc has no UUIDs: accepted unchecked
    m.gpu = VisibleGpu{-1, mig ? std::optional<std::string>(m.entry) : std::nullopt};
    return;
  }
  int found = 0;
  for (const auto& g : inv.devices) {
    if (!mig && StartsWith(g.uuid, m.entry.c_str())) {
      ++found;
      m.gpu = VisibleGpu{g.index, std::nullopt};
    }
    for (const auto& instance : mig ? g.mig_uuids : std::vector<std::string>{}) {
      if (!StartsWith(instance, m.entry.c_str())) continue;
      ++found;
      m.gpu = VisibleGpu{g.index, instance};
    }
  }
  if (found > 1) {
    m.gpu.reset();
    m.why = "a prefix of " + std::to_string(found) + " UUIDs";
  }
}

EntryMatch MatchEntry(const std::string& raw, const GpuInventory& inv) {
  EntryMatch m;
  m.entry = Trimmed(raw);
  if (StartsWith(m.entry, "GPU-") || StartsWith(m.entry, "MIG-")) {
    m.device_form = true;
    MatchUuid(inv, m);
    return m;
  }
  // CUDA reads an index like strtoul: the leading digits ("1gpu" is 1).
  size_t digits = 0;
  while (digits < m.entry.size() && digits < 6 &&
         std::isdigit(static_cast<unsigned char>(m.entry[digits]))) {
    ++digits;
  }
  if (digits == 0) return m;
  m.device_form = true;
  const int index = std::stoi(m.entry.substr(0, digits));
  if (index < static_cast<int>(inv.devices.size())) m.gpu = VisibleGpu{index, std::nullopt};
  return m;
}

std::vector<EntryMatch> MatchList(const std::string& list, const GpuInventory& inv) {
  std::vector<EntryMatch> out;
  for (const auto& entry : SplitList(list)) out.push_back(MatchEntry(entry, inv));
  return out;
}

bool SameGpu(const EntryMatch& a, const EntryMatch& b) {
  if (a.gpu->device < 0 || b.gpu->device < 0) return a.entry == b.entry;
  return a.gpu->device == b.gpu->device && a.gpu->mig_uuid == b.gpu->mig_uuid;
}

// The first entry that names the same GPU as an earlier one: "0" and "GPU-8a".
std::optional<std::pair<std::string, std::string>> FirstRepeat(
    const std::vector<EntryMatch>& matches) {
  for (size_t i = 0; i < matches.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (matches[i].gpu && matches[j].gpu && SameGpu(matches[i], matches[j])) {
        return std::pair{matches[j].entry, matches[i].entry};
      }
    }
  }
  return std::nullopt;
}

std::string Repeated(const std::pair<std::string, std::string>& repeat) {
  return repeat.first == repeat.second
             ? "GPU " + repeat.first + " is listed twice"
             : "\"" + repeat.first + "\" and \"" + repeat.second + "\" are the same GPU";
}

std::vector<VisibleGpu> Gpus(const std::vector<EntryMatch>& matches) {
  std::vector<VisibleGpu> out;
  for (const auto& m : matches) out.push_back(*m.gpu);
  return out;
}

Status RepeatedGpus(const std::string& list, const std::pair<std::string, std::string>& repeat) {
  return InvalidArgument("--gpus=" + list + ": " + Repeated(repeat) +
                         ": list each GPU once (two workers on one GPU make NCCL fail with "
                         "\"Duplicate GPU detected\")");
}

Status CheckGpusOption(const std::string& list, const std::vector<EntryMatch>& matches,
                       const GpuInventory& inv) {
  std::string unknown;
  int count = 0;
  for (const auto& m : matches) {
    if (m.gpu) continue;
    unknown += (count++ == 0 ? "" : ", ") + m.entry + (m.why.empty() ? "" : " (" + m.why + ")");
  }
  if (count > 0) {
    const std::string fix =
        inv.devices.empty() ? "run without --gpus"
                            : "list indices from 0 to " + std::to_string(inv.devices.size() - 1) +
                                  " or UUIDs of these GPUs (ddprun doctor lists them)";
    return InvalidArgument("--gpus=" + list + ": " + unknown + (count == 1 ? " names" : " name") +
                           " no GPU of this host, which has " + DescribeGpus(inv) + ": " + fix);
  }
  if (auto repeat = FirstRepeat(matches)) return RepeatedGpus(list, *repeat);
  return Status::Ok();
}

StatusOr<VisibleGpus> FromGpusOption(const std::string& list, const GpuInventory& inv) {
  VisibleGpus v;
  v.source = VisibleSource::kGpusOption;
  v.list = list;
  v.worker_devices = list;
  if (inv.source == GpuSource::kNone) {
    // Which GPUs exist is unknown; one written twice is a repeat all the same.
    const auto entries = SplitList(list);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (std::find(entries.begin(), entries.begin() + static_cast<long>(i), entries[i]) !=
          entries.begin() + static_cast<long>(i)) {
        return RepeatedGpus(list, {entries[i], entries[i]});
      }
    }
    v.warnings.push_back("--gpus=" + list + " not checked: this host's GPUs are unknown (" +
                         inv.note + "); a device that does not exist fails in the workers");
    return v;
  }
  auto matches = MatchList(list, inv);
  if (Status s = CheckGpusOption(list, matches, inv); !s.ok()) return s;
  v.checked = true;
  v.gpus = Gpus(matches);
  const bool unchecked_uuid =
      std::any_of(v.gpus.begin(), v.gpus.end(), [](const VisibleGpu& g) { return g.device < 0; });
  if (unchecked_uuid) {
    v.warnings.push_back("--gpus=" + list + ": UUIDs not checked: NVML did not answer (" +
                         inv.note + ")");
  }
  return v;
}

// CUDA's reading: up to the first entry that names no device; a repeat leaves none.
VisibleGpus FromCudaVisibleDevices(const std::string& list, const GpuInventory& inv) {
  VisibleGpus v;
  v.source = VisibleSource::kCudaVisibleDevices;
  v.list = list;
  if (inv.source == GpuSource::kNone) return v;
  v.checked = true;
  auto matches = MatchList(list, inv);
  for (size_t i = 0; i < matches.size(); ++i) {
    if (matches[i].gpu) continue;
    if (matches[i].device_form) {
      v.warnings.push_back(std::string(kCudaVisibleDevices) + "=" + list + ": " + matches[i].entry +
                           " names no GPU of this host, which has " + DescribeGpus(inv) +
                           ": CUDA ignores it and every entry after it");
    }
    matches.resize(i);
    break;
  }
  if (auto repeat = FirstRepeat(matches)) {
    v.warnings.push_back(std::string(kCudaVisibleDevices) + "=" + list + ": " + Repeated(*repeat) +
                         ", so CUDA sees no GPU: list each GPU once");
    matches.clear();
  }
  v.gpus = Gpus(matches);
  return v;
}

// Slurm's global indices. Under a device cgroup the host shows only the job's
// GPUs, renumbered from 0, so an index can exceed what it shows: when it shows
// as many GPUs as Slurm lists, all of them are the job's.
VisibleGpus FromSlurm(VisibleSource source, const char* name, const std::string& list,
                      const GpuInventory& inv) {
  VisibleGpus v;
  v.source = source;
  v.list = list;
  v.checked = true;
  std::vector<VisibleGpu> listed;
  bool fits = true;
  for (const auto& entry : SplitList(list)) {
    EntryMatch m = MatchEntry(entry, inv);
    if (!m.gpu || m.entry.find_first_not_of("0123456789") != std::string::npos) fits = false;
    if (m.gpu) listed.push_back(*m.gpu);
  }
  const size_t n = inv.devices.size();
  for (const auto& g : inv.devices) v.gpus.push_back({g.index, std::nullopt});
  if (SplitList(list).size() == n) return v;
  if (fits) {
    v.gpus = listed;
    v.worker_devices = list;
    return v;
  }
  v.warnings.push_back(std::string(name) + "=" + list + " does not match the " + DescribeGpus(inv) +
                       " of this host: the workers see all of them");
  return v;
}

}  // namespace

StatusOr<VisibleGpus> ResolveVisibleGpus(const std::optional<std::string>& gpus_option,
                                         const Environ& environ, const GpuInventory& inventory) {
  if (gpus_option) return FromGpusOption(*gpus_option, inventory);
  if (auto cvd = Lookup(environ, kCudaVisibleDevices)) {
    return FromCudaVisibleDevices(*cvd, inventory);
  }
  if (inventory.source != GpuSource::kNone) {
    for (auto [source, name] : {std::pair{VisibleSource::kSlurmStepGpus, kSlurmStepGpus},
                                {VisibleSource::kSlurmJobGpus, kSlurmJobGpus}}) {
      if (auto list = Lookup(environ, name); list && !list->empty()) {
        return FromSlurm(source, name, *list, inventory);
      }
    }
  }
  VisibleGpus v;
  v.checked = inventory.source != GpuSource::kNone;
  for (const auto& g : inventory.devices) v.gpus.push_back({g.index, std::nullopt});
  return v;
}

std::string VisibleSourceText(const VisibleGpus& visible) {
  switch (visible.source) {
    case VisibleSource::kGpusOption:
      return "--gpus=" + visible.list;
    case VisibleSource::kCudaVisibleDevices:
      return std::string(kCudaVisibleDevices) + "=" + visible.list;
    case VisibleSource::kSlurmStepGpus:
      return std::string(kSlurmStepGpus) + "=" + visible.list;
    case VisibleSource::kSlurmJobGpus:
      return std::string(kSlurmJobGpus) + "=" + visible.list;
    case VisibleSource::kAll:
      break;
  }
  return "every GPU of the host";
}

std::vector<std::optional<std::string>> LocalRankBusIds(const VisibleGpus& visible,
                                                        const GpuInventory& inventory,
                                                        int nproc_per_node) {
  std::vector<std::optional<std::string>> out(
      std::max(static_cast<size_t>(std::max(nproc_per_node, 0)), visible.gpus.size()));
  for (size_t r = 0; r < visible.gpus.size(); ++r) {
    const int device = visible.gpus[r].device;
    if (device < 0 || device >= static_cast<int>(inventory.devices.size())) continue;
    const std::string& bus = inventory.devices[static_cast<size_t>(device)].pci_bus_id;
    if (!bus.empty()) out[r] = bus;
  }
  return out;
}

int GpusSeen(const VisibleGpus& visible, const GpuInventory& host) {
  if (visible.checked) return static_cast<int>(visible.gpus.size());
  return host.source == GpuSource::kNone && !host.library_loaded ? 0 : -1;
}

}  // namespace ddprun::env
