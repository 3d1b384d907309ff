#include "env/cgroup.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace ddprun::env {

namespace {

// The mount of a cgroup file system that holds `own` (a path as
// /proc/self/cgroup gives it): cgroup2, or the v1 hierarchy with
// `controller` among its super options. Returns {mount point, path under it}.
std::optional<CgroupV2> Mounted(const std::string& proc_root, const std::string& own,
                                const std::string& controller) {
  std::ifstream mounts(proc_root + "/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    // id parent major:minor root mountpoint options [optional...] - fstype source super
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, super;
    tail >> fstype >> source >> super;
    if (controller.empty()
            ? fstype != "cgroup2"
            : fstype != "cgroup" ||
                  ("," + super + ",").find("," + controller + ",") == std::string::npos) {
      continue;
    }
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

// This process's path in the hierarchy with `controller` (v1), or in the
// unified one (controller ""); "" when it has none.
std::string OwnPath(const std::string& proc_root, const std::string& controller) {
  std::ifstream cgroups(proc_root + "/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    // hierarchy-id:controller,controller:path
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool match =
        controller.empty()
            ? line.rfind("0::", 0) == 0
            : ("," + controllers + ",").find("," + controller + ",") != std::string::npos;
    if (match) return line.substr(second + 1);
  }
  return "";
}

}  // namespace

std::optional<CgroupV2> OwnCgroupV2(const std::string& proc_root) {
  const std::string own = OwnPath(proc_root, "");
  if (own.empty() || own.find(" (deleted)") != std::string::npos) return std::nullopt;
  return Mounted(proc_root, own, "");
}

std::optional<ControllerCgroup> OwnControllerCgroup(const std::string& controller,
                                                    const std::string& probe,
                                                    const std::string& proc_root) {
  const std::string v1 = OwnPath(proc_root, controller);
  if (!v1.empty()) {
    if (auto m = Mounted(proc_root, v1, controller)) {
      return ControllerCgroup{m->mount, m->dir(), 1};
    }
    return std::nullopt;
  }
  auto v2 = OwnCgroupV2(proc_root);
  if (!v2 || access((v2->dir() + "/" + probe).c_str(), R_OK) != 0) return std::nullopt;
  return ControllerCgroup{v2->mount, v2->dir(), 2};
}

std::optional<MemoryCgroup> OwnMemoryCgroup(const std::string& proc_root) {
  return OwnControllerCgroup("memory", "memory.events", proc_root);
}

}  // namespace ddprun::env
