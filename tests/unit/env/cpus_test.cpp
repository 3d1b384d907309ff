#include "env/cpus.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

namespace ddprun::env {
namespace {

CpuFacts Online(int n) {
  CpuFacts f;
  f.online = n;
  return f;
}

TEST_CASE("without affinity, quota or Slurm every online CPU is allowed") {
  CHECK(AllowedCpus(Online(64)) == 64);
}

TEST_CASE("taskset's affinity mask narrows the online CPUs") {
  CpuFacts f = Online(64);
  f.affinity = 4;
  CHECK(AllowedCpus(f) == 4);
}

TEST_CASE("a cgroup cpu.max quota allows ceil(quota / period) CPUs") {
  CpuFacts f = Online(64);
  f.affinity = 16;
  f.cpu_max = "250000 100000";
  CHECK(AllowedCpus(f) == 3);
  f.cpu_max = "200000 100000";
  CHECK(AllowedCpus(f) == 2);
  f.cpu_max = "50000 100000";
  CHECK(AllowedCpus(f) == 1);
  f.cpu_max = "max 100000";
  CHECK(AllowedCpus(f) == 16);
}

TEST_CASE("SLURM_CPUS_ON_NODE narrows the count; the smallest limit wins") {
  CpuFacts f = Online(64);
  f.affinity = 16;
  f.slurm_cpus = "4";
  CHECK(AllowedCpus(f) == 4);
  f.cpu_max = "300000 100000";
  CHECK(AllowedCpus(f) == 3);
  f.slurm_cpus = "32";
  CHECK(AllowedCpus(f) == 3);
}

TEST_CASE("cpu.max and SLURM_CPUS_ON_NODE values that do not parse are ignored") {
  CpuFacts f = Online(8);
  for (const char* bad : {"", "abc", "0", "-2", "2.5", " 4", "4x"}) {
    f.slurm_cpus = bad;
    CHECK(AllowedCpus(f) == 8);
  }
  f.slurm_cpus.reset();
  for (const char* bad : {"", "max", "100000", "0 100000", "100000 0", "1 2 3", "x 100000"}) {
    f.cpu_max = bad;
    CHECK(AllowedCpus(f) == 8);
  }
}

TEST_CASE("the count is at least 1") {
  CpuFacts f = Online(0);
  f.affinity = 0;
  CHECK(AllowedCpus(f) == 1);
}

TEST_CASE("OMP_NUM_THREADS by default shares the allowed CPUs out, at least 1 each") {
  CHECK(DefaultOmpThreads(4, 2) == 2);
  CHECK(DefaultOmpThreads(2, 2) == 1);
  CHECK(DefaultOmpThreads(7, 2) == 3);
  CHECK(DefaultOmpThreads(2, 8) == 1);
  CHECK(DefaultOmpThreads(64, 8) == 8);
}

void Write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST_CASE("the tightest cpu.max of this cgroup and those above it is read") {
  auto root = std::filesystem::temp_directory_path() / "ddprun_cpus_test";
  std::filesystem::remove_all(root);
  Write(root / "proc/self/cgroup", "1:cpu:/\n0::/job/step\n");
  Write(root / "proc/self/mountinfo", "24 1 0:22 / /sys rw - sysfs sysfs rw\n35 24 0:30 / " +
                                          (root / "cg").string() +
                                          " rw,nosuid - cgroup2 cgroup2 rw\n");
  Write(root / "cg/job/cpu.max", "200000 100000\n");
  Write(root / "cg/job/step/cpu.max", "max 100000\n");
  auto f = ReadCpuFacts({{"SLURM_CPUS_ON_NODE", "6"}}, (root / "proc").string());
  REQUIRE(f.cpu_max);
  CHECK(*f.cpu_max == "200000 100000");
  CHECK(f.slurm_cpus == "6");
  CHECK(f.affinity.has_value());
  CHECK(AllowedCpus(f) <= 2);

  Write(root / "proc/self/cgroup", "0::/\n");  // cgroup v2 root: no cpu.max
  CHECK_FALSE(ReadCpuFacts({}, (root / "proc").string()).cpu_max);
  std::filesystem::remove_all(root);
}

TEST_CASE("cgroup v1's cpu quota counts as cpu.max does (a hybrid host)") {
  // Attack 105: Docker's --cpus on a cgroup v1 host was ignored; every CPU counted.
  auto root = std::filesystem::temp_directory_path() / "ddprun_cpus_v1_test";
  std::filesystem::remove_all(root);
  const std::string cpu = (root / "cg/cpu,cpuacct").string();
  Write(root / "proc/self/cgroup", "4:cpu,cpuacct:/docker/c1\n0::/\n");
  Write(root / "proc/self/mountinfo",
        "35 24 0:30 / " + cpu + " rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n");
  Write(root / "cg/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  Write(root / "cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  Write(root / "cg/cpu,cpuacct/docker/cpu.cfs_quota_us", "300000\n");
  Write(root / "cg/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
  Write(root / "cg/cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "150000\n");
  Write(root / "cg/cpu,cpuacct/docker/c1/cpu.cfs_period_us", "100000\n");
  auto f = ReadCpuFacts({}, (root / "proc").string());
  REQUIRE(f.cpu_max);
  CHECK(*f.cpu_max == "150000 100000");  // 1.5 CPUs: 2
  f.affinity = 8;
  CHECK(AllowedCpus(f) == 2);
  Write(root / "cg/cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "-1\n");  // none of its own
  CHECK(*ReadCpuFacts({}, (root / "proc").string()).cpu_max == "300000 100000");
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace ddprun::env
