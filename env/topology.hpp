// The machine's CPU topology as Linux's sysfs shows it: the NUMA node,
// package (socket), core and L3 cache of each CPU, and the NUMA node of a PCI
// device such as a GPU. What --numa_binding and --cpu_binding plan with
// (env/binding.hpp).
//
// The sysfs root is a parameter so that tests read recorded trees
// (tests/unit/data/topology/). Reading is thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/cpu_list.hpp"

namespace ddprun::env {

struct CpuPlace {
  int cpu = 0;
  int node = 0;     // NUMA node: 0 on a kernel without NUMA
  int package = 0;  // topology/physical_package_id: the socket
  int core = 0;     // topology/core_id: unique within its package only
  int l3 = -1;      // lowest CPU sharing its L3 (cache/index3); -1: unknown
};

struct Topology {
  std::vector<CpuPlace> cpus;  // ascending by cpu
  std::vector<int> nodes;      // NUMA nodes that have CPUs, ascending

  // nullptr for a CPU sysfs did not list.
  const CpuPlace* Find(int cpu) const;
  // The CPUs of NUMA node `node`, ascending.
  CpuList NodeCpus(int node) const;
};

// Reads `sysfs_root`/devices/system/node/nodeN/cpulist (with no node
// directory: one node 0 holding devices/system/cpu/online), then per CPU
// devices/system/cpu/cpuN/topology/{physical_package_id,core_id} and
// cache/index3/shared_cpu_list. A per-CPU file that is missing or unreadable
// keeps the default (package 0, the core numbered as the CPU, L3 unknown).
// kNotFound, naming the directory, when no CPU is found.
StatusOr<Topology> ReadTopology(const std::string& sysfs_root = "/sys");

// The NUMA node sysfs gives the PCI device `bus_id`: `sysfs_root`/bus/pci/
// devices/BUS_ID/numa_node. `bus_id` as sysfs spells it ("0000:3b:00.0") or
// as NVML and CUDA do ("00000000:3B:00.0"). -1 where the firmware does not
// say (the kernel's value); nullopt when the file cannot be read.
std::optional<int> PciNumaNode(const std::string& sysfs_root, const std::string& bus_id);

// "0000:3b:00.0" for "00000000:3B:00.0": a 4-digit domain, lower case.
std::string SysfsPciAddress(const std::string& bus_id);

}  // namespace ddprun::env
