#include "env/memory.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "env/cgroup.hpp"

namespace ddprun::env {
namespace {

namespace fs = std::filesystem;

// A fake /proc and cgroup mount under the temp dir, removed at the end.
struct FakeHost {
  fs::path root = fs::temp_directory_path() / ("ddprun_memory_" + std::to_string(getpid()));
  FakeHost() { fs::remove_all(root); }
  ~FakeHost() { fs::remove_all(root); }
  void Write(const std::string& path, const std::string& text) const {
    fs::create_directories((root / path).parent_path());
    std::ofstream(root / path) << text;
  }
  std::string proc() const { return (root / "proc").string(); }
  std::string Mountinfo(const std::string& fstype, const std::string& super) const {
    return "30 25 0:26 / " + (root / "cg").string() + " rw,nosuid - " + fstype + " cgroup " +
           super + "\n";
  }
};

TEST_CASE("memory facts from cgroup v2: kills below the cgroup, the lowest limit up the tree") {
  FakeHost h;
  h.Write("proc/self/cgroup", "0::/job/step\n");
  h.Write("proc/self/mountinfo", h.Mountinfo("cgroup2", "rw"));
  h.Write("proc/vmstat", "pgfault 7\noom_kill 3\n");
  h.Write("proc/meminfo", "MemTotal:       1024 kB\nMemFree: 1 kB\nMemAvailable:    512 kB\n");
  h.Write("cg/job/memory.max", "268435456\n");
  h.Write("cg/job/step/memory.max", "max\n");
  h.Write("cg/job/step/memory.peak", "1000\n");
  h.Write("cg/job/step/memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n");
  auto cg = OwnMemoryCgroup(h.proc());
  REQUIRE(cg.has_value());
  CHECK(cg->version == 2);
  CHECK(cg->dir == (h.root / "cg" / "job" / "step").string());
  MemoryFacts f = ReadMemoryFacts(h.proc());
  CHECK(f.host_oom_kills == 3u);
  CHECK(f.cgroup_oom_kills == 1u);
  CHECK(f.cgroup_limit == 268435456u);
  CHECK(f.cgroup_peak == 1000u);
  CHECK(f.mem_total == 1024u * 1024);
  CHECK(f.mem_available == 512u * 1024);

  h.Write("proc/vmstat", "oom_kill 5\n");
  h.Write("cg/job/step/memory.events", "oom_kill 2\n");
  MemoryFacts since = OomKillsSince(f, ReadMemoryFacts(h.proc()));
  CHECK(since.host_oom_kills == 2u);
  CHECK(since.cgroup_oom_kills == 1u);
  CHECK(since.cgroup_limit == 268435456u);
}

TEST_CASE("memory facts from a v1 memory hierarchy on a hybrid host") {
  FakeHost h;
  h.Write("proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory:/slurm/job_7\n0::/\n");
  h.Write("proc/self/mountinfo", "29 25 0:25 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n" +
                                     h.Mountinfo("cgroup", "rw,memory"));
  h.Write("cg/slurm/job_7/memory.limit_in_bytes", "536870912\n");
  h.Write("cg/slurm/memory.limit_in_bytes", "9223372036854771712\n");  // no limit
  h.Write("cg/slurm/job_7/memory.max_usage_in_bytes", "536870000\n");
  h.Write("cg/slurm/job_7/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
  auto cg = OwnMemoryCgroup(h.proc());
  REQUIRE(cg.has_value());
  CHECK(cg->version == 1);
  MemoryFacts f = ReadMemoryFacts(h.proc());
  CHECK(f.cgroup == (h.root / "cg" / "slurm" / "job_7").string());
  CHECK(f.cgroup_oom_kills == 4u);
  CHECK(f.cgroup_limit == 536870912u);
  CHECK(f.cgroup_peak == 536870000u);
  CHECK_FALSE(f.host_oom_kills.has_value());  // no vmstat here: unknown, not 0
}

TEST_CASE("no memory cgroup, unknown counts: no kills claimed") {
  FakeHost h;
  h.Write("proc/self/cgroup", "0::/\n");
  h.Write("proc/self/mountinfo", h.Mountinfo("cgroup2", "rw"));  // no memory.events at the root
  CHECK_FALSE(OwnMemoryCgroup(h.proc()).has_value());
  MemoryFacts before = ReadMemoryFacts(h.proc());
  CHECK(before.cgroup.empty());
  h.Write("proc/vmstat", "oom_kill 9\n");
  MemoryFacts since = OomKillsSince(before, ReadMemoryFacts(h.proc()));
  CHECK(since.host_oom_kills == 0u);  // unknown before: no claim
  CHECK(since.cgroup_oom_kills == 0u);
}

TEST_CASE("the doctor's memory line: the facts, and a warning after OOM kills in the cgroup") {
  MemoryFacts f;
  f.mem_total = 24ull << 30;
  f.mem_available = 20ull << 30;
  f.cgroup = "/sys/fs/cgroup/job";
  f.cgroup_limit = 8ull << 30;
  f.cgroup_peak = 1ull << 30;
  f.cgroup_oom_kills = 0;
  LimitCheck c = MemoryCheck(f);
  CHECK(c.status == CheckStatus::kOk);
  CHECK(c.measured ==
        "host 24.0 GiB, 20.0 GiB available; memory cgroup /sys/fs/cgroup/job: limit 8.0 GiB, "
        "peak 1.0 GiB");
  f.cgroup_oom_kills = 2;
  f.cgroup_limit.reset();
  c = MemoryCheck(f);
  CHECK(c.status == CheckStatus::kWarn);
  CHECK(c.measured.find("memory cgroup /sys/fs/cgroup/job: no limit, peak 1.0 GiB; 2 OOM kill(s) "
                        "in it so far") != std::string::npos);
  CHECK(c.fix.find("a higher memory limit") != std::string::npos);
}

TEST_CASE("this host's memory facts read") {
  MemoryFacts f = ReadMemoryFacts();
  REQUIRE(f.mem_total.has_value());
  CHECK(*f.mem_total > 0);
}

}  // namespace
}  // namespace ddprun::env
