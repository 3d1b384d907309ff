#include "env/cgroup.hpp"

#include <fstream>
#include <sstream>

namespace ddprun::env {

std::optional<CgroupV2> OwnCgroupV2(const std::string& proc_root) {
  std::string own;
  std::ifstream cgroups(proc_root + "/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  }
  if (own.empty() || own.find(" (deleted)") != std::string::npos) return std::nullopt;
  std::ifstream mounts(proc_root + "/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    // id parent major:minor root mountpoint options [optional...] - fstype source super
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root, mountpoint;
    fields >> id >> parent >> dev >> root >> mountpoint;
    // A mount of a subtree (cgroup namespaces, bind mounts) shows paths below its root.
    const std::string under = root == "/"               ? own
                              : own.rfind(root, 0) == 0 ? own.substr(root.size())
                                                        : std::string("-");
    if (under == "-") continue;
    return CgroupV2{mountpoint, under == "/" ? "" : under};
  }
  return std::nullopt;
}

}  // namespace ddprun::env
