#include "env/topology.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "base/parse.hpp"

namespace ddprun::env {
namespace {

std::optional<std::string> FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::optional<int> ReadInt(const std::string& path) {
  auto line = FirstLine(path);
  if (!line) return std::nullopt;
  auto n = ParseInteger("value", *line, -1, 1 << 20, "");
  if (!n.ok()) return std::nullopt;
  return static_cast<int>(*n);
}

std::optional<CpuList> ReadCpuList(const std::string& path) {
  auto line = FirstLine(path);
  if (!line) return std::nullopt;
  return ParseCpuList(*line);
}

// NUMA node id -> its CPUs, from nodeN/cpulist; nodes without CPUs (memory
// only, such as CXL or HBM) are left out.
std::vector<std::pair<int, CpuList>> ReadNodes(const std::string& node_dir) {
  std::vector<std::pair<int, CpuList>> nodes;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(node_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    auto id = ParseInteger("node", name.substr(4), 0, 1 << 20, "");
    auto cpus = ReadCpuList(entry.path().string() + "/cpulist");
    if (id.ok() && cpus && !cpus->empty()) nodes.emplace_back(static_cast<int>(*id), *cpus);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

CpuPlace ReadPlace(const std::string& cpu_dir, int cpu, int node) {
  CpuPlace p;
  p.cpu = cpu;
  p.node = node;
  const std::string dir = cpu_dir + "/cpu" + std::to_string(cpu);
  p.package = ReadInt(dir + "/topology/physical_package_id").value_or(0);
  p.core = ReadInt(dir + "/topology/core_id").value_or(cpu);
  if (auto l3 = ReadCpuList(dir + "/cache/index3/shared_cpu_list"); l3 && !l3->empty()) {
    p.l3 = l3->front();
  }
  return p;
}

}  // namespace

const CpuPlace* Topology::Find(int cpu) const {
  auto it = std::lower_bound(cpus.begin(), cpus.end(), cpu,
                             [](const CpuPlace& p, int c) { return p.cpu < c; });
  return it != cpus.end() && it->cpu == cpu ? &*it : nullptr;
}

CpuList Topology::NodeCpus(int node) const {
  CpuList out;
  for (const auto& p : cpus) {
    if (p.node == node) out.push_back(p.cpu);
  }
  return out;
}

StatusOr<Topology> ReadTopology(const std::string& sysfs_root) {
  const std::string cpu_dir = sysfs_root + "/devices/system/cpu";
  auto nodes = ReadNodes(sysfs_root + "/devices/system/node");
  if (nodes.empty()) {
    auto online = ReadCpuList(cpu_dir + "/online");
    if (online && !online->empty()) nodes.emplace_back(0, *online);
  }
  if (nodes.empty()) {
    return NotFound("no CPU found in " + sysfs_root + "/devices/system/node/node*/cpulist or " +
                    cpu_dir + "/online");
  }
  Topology t;
  for (const auto& [node, cpus] : nodes) {
    t.nodes.push_back(node);
    for (int cpu : cpus) t.cpus.push_back(ReadPlace(cpu_dir, cpu, node));
  }
  std::sort(t.cpus.begin(), t.cpus.end(),
            [](const CpuPlace& a, const CpuPlace& b) { return a.cpu < b.cpu; });
  return t;
}

std::string SysfsPciAddress(const std::string& bus_id) {
  std::string id;
  for (char c : bus_id)
    id.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  const size_t colon = id.find(':');
  // NVML writes an 8-digit domain, sysfs at least 4 digits (VMD domains
  // such as 10000 have 5): drop leading zeros down to 4 digits.
  if (colon != std::string::npos && id.find(':', colon + 1) != std::string::npos) {
    size_t zeros = 0;
    while (colon - zeros > 4 && id[zeros] == '0') ++zeros;
    id.erase(0, zeros);
  }
  return id;
}

std::optional<int> PciNumaNode(const std::string& sysfs_root, const std::string& bus_id) {
  return ReadInt(sysfs_root + "/bus/pci/devices/" + SysfsPciAddress(bus_id) + "/numa_node");
}

}  // namespace ddprun::env
