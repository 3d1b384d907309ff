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

// The cgroup of this process that `controller` ("memory", "pids") accounts
// it in: the cgroup v1 hierarchy's with that controller where one is mounted
// (hybrid hosts), else the v2 one when the controller is enabled there
// (`probe`, a file of the controller's, exists in it).
struct ControllerCgroup {
  std::string mount;  // the hierarchy's mount point
  std::string dir;    // the cgroup's directory, under `mount`
  int version = 2;    // 1 or 2
};
std::optional<ControllerCgroup> OwnControllerCgroup(const std::string& controller,
                                                    const std::string& probe,
                                                    const std::string& proc_root = "/proc");

using MemoryCgroup = ControllerCgroup;
// OwnControllerCgroup("memory", "memory.events").
std::optional<MemoryCgroup> OwnMemoryCgroup(const std::string& proc_root = "/proc");

}  // namespace ddprun::env
