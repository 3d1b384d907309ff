// What the kernel's OOM killer did, and the memory the workers had. Read
// before and after a group runs: a worker that died of a SIGKILL nobody in
// the job sent, while the OOM kill count rose, ran out of memory (torchrun
// says "exitcode: -9" and no more).
//
// Sources: /proc/vmstat oom_kill (every OOM kill on the host, of a memory
// cgroup's limit too), /proc/meminfo, and the launcher's memory cgroup (the
// workers share it): v2 memory.events oom_kill (its descendants included),
// memory.max and memory.peak; v1 memory.oom_control oom_kill,
// memory.limit_in_bytes and memory.max_usage_in_bytes.
//
// Reads files only; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "env/limits.hpp"

namespace ddprun::env {

struct MemoryFacts {
  std::optional<uint64_t> host_oom_kills;    // nullopt: unknown (kernel < 4.13)
  std::string cgroup;                        // the memory cgroup's directory; "" none known
  std::optional<uint64_t> cgroup_oom_kills;  // in it and below it
  std::optional<uint64_t> cgroup_limit;      // the lowest limit of it and its ancestors
  std::optional<uint64_t> cgroup_peak;       // its most memory in use so far
  std::optional<uint64_t> mem_total;         // the host's, bytes
  std::optional<uint64_t> mem_available;
};

// Now; `proc_root` and the cgroup mount found through it are the sources.
MemoryFacts ReadMemoryFacts(const std::string& proc_root = "/proc");

// The doctor's "memory" line: the host's memory, the memory cgroup's limit and
// peak; a warning when processes of that cgroup were OOM-killed before.
LimitCheck MemoryCheck(const MemoryFacts& f);

// `after` with its OOM kill counts made the kills since `before` (0 when a
// count went down or either is unknown: no claim).
MemoryFacts OomKillsSince(const MemoryFacts& before, const MemoryFacts& after);

}  // namespace ddprun::env
