#include "env/topology.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ddprun::env {
namespace {

const std::string kData = DDPRUN_TEST_DATA "/topology";

TEST_CASE("topology: the 2-socket tree has 4 NUMA nodes of 8 CPUs, 2 per socket") {
  auto t = ReadTopology(kData + "/two_socket/sys");
  REQUIRE(t.ok());
  CHECK(t->cpus.size() == 32);
  CHECK(t->nodes == std::vector<int>{0, 1, 2, 3});
  CHECK(FormatCpuList(t->NodeCpus(0)) == "0-3,16-19");
  CHECK(FormatCpuList(t->NodeCpus(3)) == "12-15,28-31");
  const CpuPlace* sibling = t->Find(16);
  REQUIRE(sibling != nullptr);
  CHECK(sibling->node == 0);
  CHECK(sibling->package == 0);
  CHECK(sibling->core == 0);
  CHECK(sibling->l3 == 0);
  const CpuPlace* p = t->Find(27);
  REQUIRE(p != nullptr);
  CHECK(p->node == 2);
  CHECK(p->package == 1);
  CHECK(p->core == 3);
  CHECK(p->l3 == 10);
  CHECK(t->Find(32) == nullptr);
}

TEST_CASE("topology: the 1-socket tree has one node of 8 CPUs sharing one L3") {
  auto t = ReadTopology(kData + "/one_socket/sys");
  REQUIRE(t.ok());
  CHECK(t->nodes == std::vector<int>{0});
  CHECK(FormatCpuList(t->NodeCpus(0)) == "0-7");
  for (const auto& p : t->cpus) CHECK(p.l3 == 0);
  CHECK(t->Find(5)->core == 1);
}

TEST_CASE("topology: without node directories every online CPU is node 0, with defaults") {
  const std::string root = std::filesystem::temp_directory_path().string() + "/ddprun_topology_" +
                           std::to_string(getpid());
  std::filesystem::create_directories(root + "/devices/system/cpu");
  std::ofstream(root + "/devices/system/cpu/online") << "0-2\n";
  auto t = ReadTopology(root);
  std::filesystem::remove_all(root);
  REQUIRE(t.ok());
  CHECK(t->nodes == std::vector<int>{0});
  REQUIRE(t->cpus.size() == 3);
  CHECK(t->cpus[2].cpu == 2);
  CHECK(t->cpus[2].core == 2);
  CHECK(t->cpus[2].l3 == -1);
}

TEST_CASE("topology: a tree without CPUs is kNotFound naming where it looked") {
  auto t = ReadTopology("/nonexistent/sys");
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().code() == StatusCode::kNotFound);
  CHECK(t.status().message().find("/nonexistent/sys/devices/system/node") != std::string::npos);
}

TEST_CASE("topology: a GPU's NUMA node comes from its PCI device, in sysfs or NVML spelling") {
  const std::string two = kData + "/two_socket/sys";
  CHECK(PciNumaNode(two, "0000:18:00.0") == 0);
  CHECK(PciNumaNode(two, "0000:5d:00.0") == 1);
  CHECK(PciNumaNode(two, "00000000:9A:00.0") == 2);
  CHECK(PciNumaNode(two, "0000:db:00.0") == 3);
  CHECK(PciNumaNode(kData + "/one_socket/sys", "0000:01:00.0") == -1);
  CHECK_FALSE(PciNumaNode(two, "0000:ff:00.0").has_value());
}

TEST_CASE("topology: NVML bus ids become sysfs addresses") {
  CHECK(SysfsPciAddress("00000000:3B:00.0") == "0000:3b:00.0");
  CHECK(SysfsPciAddress("0000:3b:00.0") == "0000:3b:00.0");
  CHECK(SysfsPciAddress("00010000:01:00.0") == "10000:01:00.0");
}

}  // namespace
}  // namespace ddprun::env
