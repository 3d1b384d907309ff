// Reading the OS for env/limits.hpp: LimitFacts from getrlimit, /proc, /sys
// and the cgroups (ReadLimitFacts).
#include <pwd.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "base/format.hpp"
#include "base/parse.hpp"
#include "env/cgroup.hpp"
#include "env/cpus.hpp"
#include "env/limits.hpp"
#include "env/names.hpp"

namespace ddprun::env {

std::optional<uint64_t> ParseCount(const std::string& s) {
  auto n = ParseInteger("count", s, 0, 999'999'999, "");
  if (!n.ok()) return std::nullopt;
  return static_cast<uint64_t>(*n);
}

namespace {

Rlimit GetLimit(int resource) {
  rlimit r{};
  if (getrlimit(resource, &r) != 0) return {};
  auto conv = [](rlim_t v) { return v == RLIM_INFINITY ? kUnlimited : static_cast<uint64_t>(v); };
  return {conv(r.rlim_cur), conv(r.rlim_max)};
}

std::string UserName(uint32_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) != 0 || found == nullptr) {
    return std::to_string(uid);
  }
  return pw.pw_name;
}

bool HasEntries(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  return !ec && it != std::filesystem::directory_iterator();
}

// Entries of /proc/self/fd, less the one the listing itself holds open.
uint64_t CountOpenFds(const std::string& dir) {
  std::error_code ec;
  uint64_t n = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n > 0 ? n - 1 : 0;
}

template <typename T>
std::optional<T> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  T v{};
  if (in >> v) return v;
  return std::nullopt;
}

// The lowest pids.max from this process's pids cgroup (v1 or v2) up to the
// hierarchy's root ("max": none), with that cgroup's pids.current.
void ReadPidsLimit(const std::string& proc_root, LimitFacts& f) {
  const std::optional<ControllerCgroup> own = OwnControllerCgroup("pids", "pids.max", proc_root);
  if (!own) return;
  for (std::string dir = own->dir; dir.size() >= own->mount.size();) {
    std::ifstream in(dir + "/pids.max");
    std::string value;
    if (in >> value) {
      if (f.pids_cgroup.empty()) f.pids_cgroup = dir;
      const std::optional<uint64_t> n = value == "max" ? std::nullopt : ParseCount(value);
      if (n && (!f.pids_max || *n < *f.pids_max)) {
        f.pids_max = n;
        f.pids_cgroup = dir;
        f.pids_current = ReadNumber<uint64_t>(dir + "/pids.current").value_or(0);
      }
    }
    if (dir.size() == own->mount.size()) break;
    dir.erase(dir.rfind('/'));
  }
}

// The initial user namespace maps every uid to itself: "0 0 4294967295".
bool InitialUserNamespace(const std::string& uid_map) {
  std::ifstream in(uid_map);
  uint64_t inside = 1, outside = 1, count = 0;
  if (!(in >> inside >> outside >> count)) return true;  // no user namespaces in this kernel
  return inside == 0 && outside == 0 && count == 4294967295u;
}

}  // namespace

LimitFacts ReadLimitFacts(const Environ& environ, const OsPaths& paths) {
  LimitFacts f;
  f.uid = getuid();
  f.user = UserName(f.uid);
  f.nproc = GetLimit(RLIMIT_NPROC);
  f.nofile = GetLimit(RLIMIT_NOFILE);
  f.open_fds = CountOpenFds(paths.proc_root + "/self/fd");
  f.memlock = GetLimit(RLIMIT_MEMLOCK);
  f.fsize = GetLimit(RLIMIT_FSIZE);
  f.address_space = GetLimit(RLIMIT_AS);
  f.data = GetLimit(RLIMIT_DATA);
  f.stack = GetLimit(RLIMIT_STACK);
  f.core = GetLimit(RLIMIT_CORE);
  f.user_processes = UserProcesses(f.uid, paths.proc_root);
  f.user_namespace = !InitialUserNamespace(paths.proc_root + "/self/uid_map");
  f.nr_open = ReadNumber<uint64_t>(paths.proc_root + "/sys/fs/nr_open").value_or(f.nr_open);
  f.infiniband = HasEntries(paths.sys_root + "/class/infiniband");
  struct statvfs vfs {};
  if (statvfs(paths.shm.c_str(), &vfs) == 0) {
    f.shm_free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    f.shm_read_only = (vfs.f_flag & ST_RDONLY) != 0;
    f.shm_unlimited = vfs.f_blocks == 0;  // tmpfs size=0
    if (vfs.f_files > 0) f.shm_inodes_free = static_cast<uint64_t>(vfs.f_favail);
  }
  if (auto b = Lookup(environ, "NCCL_BUFFSIZE"); b && ParseCount(*b)) {
    f.nccl_buffsize = *ParseCount(*b);
  }
  f.cpus = AllowedCpuCount(environ);
  f.omp_num_threads = Lookup(environ, kOmpNumThreads);
  ReadPidsLimit(paths.proc_root, f);
  return f;
}

}  // namespace ddprun::env
