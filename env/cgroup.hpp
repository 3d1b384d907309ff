// Where this process's cgroup v2 is: its mount point (found in mountinfo, so a
// hybrid host's /sys/fs/cgroup/unified counts) and its path under it.
#pragma once

#include <optional>
#include <string>

namespace ddprun::env {

struct CgroupV2 {
  std::string mount;  // where the cgroup2 file system holding it is mounted
  std::string path;   // under the mount: "" for its root, else "/a/b"
  std::string dir() const { return mount + path; }
};

// From `proc_root`/self/cgroup ("0::PATH") and `proc_root`/self/mountinfo;
// nullopt without a cgroup v2 this process can name.
std::optional<CgroupV2> OwnCgroupV2(const std::string& proc_root = "/proc");

// The cgroup that accounts this process's memory: a cgroup v1 memory
// hierarchy's where one is mounted (hybrid hosts), else the v2 one when its
// memory controller is enabled there (memory.events exists).
struct MemoryCgroup {
  std::string mount;  // the hierarchy's mount point
  std::string dir;    // the cgroup's directory, under `mount`
  int version = 2;    // 1 or 2
};
std::optional<MemoryCgroup> OwnMemoryCgroup(const std::string& proc_root = "/proc");

}  // namespace ddprun::env
