#include "env/memory.hpp"

#include <fstream>
#include <sstream>

#include "base/format.hpp"
#include "env/cgroup.hpp"

namespace ddprun::env {

namespace {

// The value of `key` in a "key value" file (vmstat, memory.events,
// memory.oom_control, meminfo's "Key: N kB"), times `unit`.
std::optional<uint64_t> KeyedValue(const std::string& path, const std::string& key,
                                   uint64_t unit = 1) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name;
    uint64_t value = 0;
    if (fields >> name >> value && (name == key || name == key + ":")) return value * unit;
  }
  return std::nullopt;
}

// A file holding one number; "max" (v2) and v1's page-rounded 2^63 are no limit.
std::optional<uint64_t> Number(const std::string& path) {
  std::ifstream in(path);
  uint64_t value = 0;
  if (!(in >> value) || value >= (uint64_t{1} << 62)) return std::nullopt;
  return value;
}

// The lowest of `file` in `dir` and its ancestors down to `mount`.
std::optional<uint64_t> LowestUpward(const std::string& mount, std::string dir,
                                     const std::string& file) {
  std::optional<uint64_t> lowest;
  while (dir.size() > mount.size()) {
    auto v = Number(dir + "/" + file);
    if (v && (!lowest || *v < *lowest)) lowest = v;
    dir.erase(dir.rfind('/'));
  }
  return lowest;
}

}  // namespace

MemoryFacts ReadMemoryFacts(const std::string& proc_root) {
  MemoryFacts f;
  f.host_oom_kills = KeyedValue(proc_root + "/vmstat", "oom_kill");
  f.mem_total = KeyedValue(proc_root + "/meminfo", "MemTotal", 1024);
  f.mem_available = KeyedValue(proc_root + "/meminfo", "MemAvailable", 1024);
  auto cgroup = OwnMemoryCgroup(proc_root);
  if (!cgroup) return f;
  f.cgroup = cgroup->dir;
  if (cgroup->version == 2) {
    f.cgroup_oom_kills = KeyedValue(f.cgroup + "/memory.events", "oom_kill");
    f.cgroup_limit = LowestUpward(cgroup->mount, f.cgroup, "memory.max");
    f.cgroup_peak = Number(f.cgroup + "/memory.peak");
  } else {
    f.cgroup_oom_kills = KeyedValue(f.cgroup + "/memory.oom_control", "oom_kill");
    f.cgroup_limit = LowestUpward(cgroup->mount, f.cgroup, "memory.limit_in_bytes");
    f.cgroup_peak = Number(f.cgroup + "/memory.max_usage_in_bytes");
  }
  return f;
}

LimitCheck MemoryCheck(const MemoryFacts& f) {
  LimitCheck check{"memory", CheckStatus::kOk, "", ""};
  if (f.mem_total && f.mem_available) {
    check.measured =
        "host " + FormatBytes(*f.mem_total) + ", " + FormatBytes(*f.mem_available) + " available";
  }
  if (!f.cgroup.empty()) {
    check.measured += (check.measured.empty() ? "" : "; ") + std::string("memory cgroup ") +
                      f.cgroup + ": " +
                      (f.cgroup_limit ? "limit " + FormatBytes(*f.cgroup_limit) : "no limit");
    if (f.cgroup_peak) check.measured += ", peak " + FormatBytes(*f.cgroup_peak);
  }
  const uint64_t killed = f.cgroup_oom_kills.value_or(0);
  if (killed > 0) {
    check.status = CheckStatus::kWarn;
    check.measured += "; " + std::to_string(killed) + " OOM kill(s) in it so far";
    check.fix =
        "a job here may be OOM-killed too: a higher memory limit, or fewer or lighter workers "
        "(DataLoader num_workers); dmesg names the processes killed";
  }
  if (check.measured.empty()) check.measured = "unknown (no /proc/meminfo)";
  return check;
}

MemoryFacts OomKillsSince(const MemoryFacts& before, const MemoryFacts& after) {
  auto since = [](const std::optional<uint64_t>& b, const std::optional<uint64_t>& a) {
    return b && a && *a > *b ? *a - *b : uint64_t{0};
  };
  MemoryFacts f = after;
  f.host_oom_kills = since(before.host_oom_kills, after.host_oom_kills);
  f.cgroup_oom_kills = before.cgroup == after.cgroup
                           ? since(before.cgroup_oom_kills, after.cgroup_oom_kills)
                           : uint64_t{0};
  return f;
}

}  // namespace ddprun::env
