#include "env/gpus.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace ddprun::env {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the temp dir, removed when the test ends.
struct TempTree {
  fs::path root;
  explicit TempTree(const char* name) : root(fs::temp_directory_path() / name) {
    fs::remove_all(root);
  }
  ~TempTree() { fs::remove_all(root); }
  void Write(const std::string& path, const std::string& text) const {
    fs::create_directories((root / path).parent_path());
    std::ofstream(root / path) << text;
  }
};

// Sets an environment variable for the fake NVML for the scope of a test.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

GpuDiscoveryPaths Paths(const std::string& library, const TempTree& tree) {
  return {library, (tree.root / "sys").string(), (tree.root / "proc").string()};
}

TEST_CASE("NVML's bus id becomes the sysfs form") {
  CHECK(NormalizeBusId("00000000:17:00.0") == "0000:17:00.0");
  CHECK(NormalizeBusId("00000000:B3:1F.7") == "0000:b3:1f.7");
  CHECK(NormalizeBusId("0001:65:00.0") == "0001:65:00.0");
  CHECK(NormalizeBusId("NOT-A-BUS") == "not-a-bus");
  CHECK(NormalizeBusId("0000:17:00.0x") == "0000:17:00.0x");
}

TEST_CASE("the NUMA node comes from sysfs; -1 or a missing file is unknown") {
  TempTree tree("ddprun_numa_test");
  tree.Write("bus/pci/devices/0000:17:00.0/numa_node", "1\n");
  tree.Write("bus/pci/devices/0000:65:00.0/numa_node", "-1\n");
  CHECK(ReadNumaNode(tree.root.string(), "0000:17:00.0") == 1);
  CHECK_FALSE(ReadNumaNode(tree.root.string(), "0000:65:00.0").has_value());
  CHECK_FALSE(ReadNumaNode(tree.root.string(), "0000:99:00.0").has_value());
  CHECK_FALSE(ReadNumaNode(tree.root.string(), "").has_value());
}

TEST_CASE("no NVML library and no /proc list: no GPU, with the reason") {
  TempTree tree("ddprun_no_nvml_test");
  auto inv = DiscoverGpus(Paths("/nonexistent/libnvidia-ml.so.1", tree));
  CHECK(inv.source == GpuSource::kNone);
  CHECK(inv.devices.empty());
  CHECK_FALSE(inv.library_loaded);
  CHECK(inv.note.find("/nonexistent/libnvidia-ml.so.1") != std::string::npos);
  CHECK(DescribeGpus(inv) == "no GPU");
}

TEST_CASE("without NVML the driver's /proc list gives indices in bus order, names, NUMA") {
  TempTree tree("ddprun_procfs_gpu_test");
  tree.Write("proc/driver/nvidia/gpus/0000:65:00.0/information", "Model: \t NVIDIA H200\n");
  tree.Write("proc/driver/nvidia/gpus/0000:17:00.0/information", "Model: NVIDIA H100\n");
  tree.Write("sys/bus/pci/devices/0000:65:00.0/numa_node", "1\n");
  auto inv = DiscoverGpus(Paths("/nonexistent/libnvidia-ml.so.1", tree));
  CHECK(inv.source == GpuSource::kProcfs);
  REQUIRE(inv.devices.size() == 2);
  CHECK(inv.devices[0].pci_bus_id == "0000:17:00.0");
  CHECK(inv.devices[0].name == "NVIDIA H100");
  CHECK(inv.devices[1].name == "NVIDIA H200");
  CHECK(inv.devices[1].numa_node == 1);
  CHECK(inv.devices[1].uuid.empty());
  CHECK(DescribeGpus(inv) == "2 GPUs: 0 (0000:17:00.0), 1 (0000:65:00.0)");
}

TEST_CASE("the fake NVML: UUIDs, bus ids, NUMA, memory and MIG instances") {
  TempTree tree("ddprun_fake_nvml_test");
  tree.Write("sys/bus/pci/devices/0000:b3:00.0/numa_node", "1\n");
  ScopedEnv devices("FAKE_NVML_DEVICES",
                    "GPU-aaaa:0000:17:00.0,GPU-bbbb:0000:B3:00.0+MIG-1111+MIG-2222");
  auto inv = DiscoverGpus(Paths(DDPRUN_FAKE_NVML, tree));
  CHECK(inv.source == GpuSource::kNvml);
  CHECK(inv.note.empty());
  REQUIRE(inv.devices.size() == 2);
  const GpuDevice& a = inv.devices[0];
  CHECK(a.uuid == "GPU-aaaa");
  CHECK(a.name == "Fake GPU");
  CHECK(a.pci_bus_id == "0000:17:00.0");
  CHECK_FALSE(a.numa_node.has_value());
  CHECK(a.memory_bytes == (80ULL << 30));
  CHECK_FALSE(a.mig_enabled);
  const GpuDevice& b = inv.devices[1];
  CHECK(b.index == 1);
  CHECK(b.pci_bus_id == "0000:b3:00.0");
  CHECK(b.numa_node == 1);
  CHECK(b.mig_enabled);
  CHECK(b.mig_uuids == std::vector<std::string>{"MIG-1111", "MIG-2222"});
  CHECK(DescribeGpus(inv) == "2 GPUs: 0 GPU-aaaa (0000:17:00.0), 1 GPU-bbbb (0000:b3:00.0)");
}

TEST_CASE("an NVML that loads but fails to initialise: no GPU, the NVML error as reason") {
  TempTree tree("ddprun_fake_nvml_init_test");
  ScopedEnv devices("FAKE_NVML_DEVICES", "GPU-aaaa:0000:17:00.0");
  ScopedEnv error("FAKE_NVML_INIT_ERROR", "9");
  auto inv = DiscoverGpus(Paths(DDPRUN_FAKE_NVML, tree));
  CHECK(inv.source == GpuSource::kNone);
  CHECK(inv.library_loaded);
  CHECK(inv.devices.empty());
  CHECK(inv.note == "nvmlInit_v2: Driver Not Loaded (NVML error 9)");
}

TEST_CASE("a library without NVML's symbols is no NVML") {
  TempTree tree("ddprun_not_nvml_test");
  auto inv = DiscoverGpus(Paths("libc.so.6", tree));
  CHECK(inv.source == GpuSource::kNone);
  CHECK(inv.note == "libc.so.6: no symbol nvmlInit_v2 (NVML too old?)");
}

}  // namespace
}  // namespace ddprun::env
