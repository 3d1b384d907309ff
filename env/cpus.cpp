#include "env/cpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/parse.hpp"
#include "env/cgroup.hpp"
#include "env/names.hpp"

namespace ddprun::env {
namespace {

std::optional<long long> Count(const std::string& text) {
  auto n = ParseInteger("count", text, 1, 1LL << 40, "");
  if (!n.ok()) return std::nullopt;
  return *n;
}

// ceil(QUOTA / PERIOD) of a cpu.max line; nullopt for "max PERIOD" and any
// line of another shape.
std::optional<long long> QuotaCpus(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota_text, period_text, rest;
  if (!(in >> quota_text >> period_text) || (in >> rest)) return std::nullopt;
  auto quota = Count(quota_text);
  auto period = Count(period_text);
  if (!quota || !period) return std::nullopt;
  return (*quota + *period - 1) / *period;
}

struct CpuSetFree {
  void operator()(cpu_set_t* set) const { CPU_FREE(set); }
};

// sched_getaffinity(0) in a set sized for the kernel's mask: glibc's fixed
// cpu_set_t holds 1024 CPUs and EINVAL means the mask is wider, so retry with
// a set twice the size. Calls `use(set, bytes, size)` on success.
template <typename Use>
bool WithAffinity(Use use) {
  for (int size = 1024; size <= (1 << 20); size *= 2) {
    std::unique_ptr<cpu_set_t, CpuSetFree> set(CPU_ALLOC(size));
    if (!set) return false;
    const size_t bytes = CPU_ALLOC_SIZE(size);
    if (sched_getaffinity(0, bytes, set.get()) == 0) {
      use(set.get(), bytes, size);
      return true;
    }
    if (errno != EINVAL) return false;
  }
  return false;
}

int AffinityCount() {
  int n = 0;
  WithAffinity([&n](const cpu_set_t* set, size_t bytes, int) { n = CPU_COUNT_S(bytes, set); });
  return n;
}

std::optional<std::string> FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// The tightest line of `quota` (a "QUOTA PERIOD" line of directory `dir`, or
// nullopt) of `dir` and the directories above it, up to `top`.
template <typename Quota>
std::optional<std::string> Tightest(std::string dir, const std::string& top, Quota quota) {
  std::optional<std::string> tightest;
  while (true) {
    auto line = quota(dir);
    if (line && QuotaCpus(*line) && (!tightest || *QuotaCpus(*line) < *QuotaCpus(*tightest))) {
      tightest = line;
    }
    const size_t slash = dir.rfind('/');
    if (dir.size() <= top.size() || slash == std::string::npos) break;
    dir.resize(slash);
  }
  return tightest;
}

// The cpu.max, of this cgroup and those above it, that allows the fewest CPUs;
// under cgroup v1's cpu controller (a hybrid host: Docker's --cpus, a
// Kubernetes CPU limit there), cpu.cfs_quota_us over cpu.cfs_period_us, as
// such a line (attack 105: ignored, every CPU of the host counted).
std::optional<std::string> TightestCpuMax(const std::string& proc_root) {
  if (auto v1 = OwnControllerCgroup("cpu", "cpu.max", proc_root); v1 && v1->version == 1) {
    return Tightest(v1->dir, v1->mount, [](const std::string& dir) -> std::optional<std::string> {
      auto quota = FirstLine(dir + "/cpu.cfs_quota_us");  // -1: none
      auto period = FirstLine(dir + "/cpu.cfs_period_us");
      if (!quota || !period) return std::nullopt;
      return *quota + " " + *period;
    });
  }
  auto cgroup = OwnCgroupV2(proc_root);
  if (!cgroup) return std::nullopt;
  return Tightest(cgroup->dir(), cgroup->mount,
                  [](const std::string& dir) { return FirstLine(dir + "/cpu.max"); });
}

}  // namespace

int AllowedCpus(const CpuFacts& f) {
  long long n = f.affinity && *f.affinity > 0 ? *f.affinity : f.online;
  if (f.cpu_max) {
    if (auto q = QuotaCpus(*f.cpu_max)) n = std::min(n, *q);
  }
  if (f.slurm_cpus) {
    if (auto s = Count(*f.slurm_cpus)) n = std::min(n, *s);
  }
  return static_cast<int>(std::max(1LL, n));
}

CpuFacts ReadCpuFacts(const Environ& environ, const std::string& proc_root) {
  CpuFacts f;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  f.online = online > 0 ? static_cast<int>(online) : 1;
  if (const int a = AffinityCount(); a > 0) f.affinity = a;
  f.cpu_max = TightestCpuMax(proc_root);
  f.slurm_cpus = Lookup(environ, kSlurmCpusOnNode);
  return f;
}

std::optional<CpuList> AffinityCpus() {
  CpuList cpus;
  const bool ok = WithAffinity([&cpus](const cpu_set_t* set, size_t bytes, int size) {
    for (int c = 0; c < size; ++c) {
      if (CPU_ISSET_S(c, bytes, set)) cpus.push_back(c);
    }
  });
  if (!ok) return std::nullopt;
  return cpus;
}

int AllowedCpuCount(const Environ& environ) { return AllowedCpus(ReadCpuFacts(environ)); }

int DefaultOmpThreads(int cpus, int workers) { return std::max(1, cpus / std::max(1, workers)); }

}  // namespace ddprun::env
