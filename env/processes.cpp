#include "env/processes.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "base/unique_fd.hpp"

namespace ddprun::env {

std::optional<ProcEntry> ParseProcStat(std::string_view stat) {
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  ProcEntry e;
  long pid = 0;
  if (std::sscanf(std::string(stat.substr(0, close)).c_str(), "%ld", &pid) != 1 || pid <= 0) {
    return std::nullopt;
  }
  e.pid = static_cast<pid_t>(pid);
  // Fields after comm: 3 state, 4 ppid, 5 pgrp, 6 session, ..., 22 starttime.
  const std::string rest(stat.substr(close + 1));
  int ppid = 0, pgrp = 0, session = 0;
  int used = 0;
  if (std::sscanf(rest.c_str(), " %c %d %d %d%n", &e.state, &ppid, &pgrp, &session, &used) != 4) {
    return std::nullopt;
  }
  e.ppid = static_cast<pid_t>(ppid);
  e.session = static_cast<pid_t>(session);
  const char* p = rest.c_str() + used;
  for (int field = 7; field < 22; ++field) {  // skip to the one before starttime
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  char* end = nullptr;
  e.start_time = std::strtoull(p, &end, 10);
  if (end == p) return std::nullopt;
  return e;
}

std::optional<ProcEntry> ReadProcEntry(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char buf[1024];  // comm is at most 16 bytes: a stat line is far shorter
  ssize_t n;
  do {
    n = read(fd.get(), buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return std::nullopt;
  return ParseProcStat(std::string_view(buf, static_cast<size_t>(n)));
}

std::optional<int> ParseBlockedWrite(std::string_view syscall) {
  long number = -1;
  unsigned long long fd = 0;
  const std::string text(syscall);
  if (std::sscanf(text.c_str(), "%ld 0x%llx", &number, &fd) != 2) return std::nullopt;
  if (number != SYS_write && number != SYS_writev) return std::nullopt;
  if (fd > static_cast<unsigned long long>(INT_MAX)) return std::nullopt;
  return static_cast<int>(fd);
}

std::optional<int> BlockedWrite(pid_t pid) {
  UniqueFd fd(open(("/proc/" + std::to_string(pid) + "/syscall").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char buf[256];
  const ssize_t n = read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return std::nullopt;
  return ParseBlockedWrite(std::string_view(buf, static_cast<size_t>(n)));
}

std::vector<ProcEntry> ReadProcTable() {
  std::vector<ProcEntry> table;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return table;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    if (auto entry = ReadProcEntry(static_cast<pid_t>(pid))) table.push_back(*entry);
  }
  closedir(proc);
  return table;
}

std::vector<ProcEntry> Descendants(const std::vector<ProcEntry>& table, pid_t root) {
  std::unordered_multimap<pid_t, const ProcEntry*> children;
  for (const auto& e : table) {
    if (e.pid != e.ppid) children.emplace(e.ppid, &e);
  }
  std::vector<ProcEntry> out;
  std::vector<pid_t> parents = {root};
  for (size_t i = 0; i < parents.size() && out.size() < table.size(); ++i) {
    auto [first, last] = children.equal_range(parents[i]);
    for (auto it = first; it != last; ++it) {
      if (it->second->pid == root) continue;  // a table read across a reparenting
      out.push_back(*it->second);
      parents.push_back(it->second->pid);
    }
  }
  return out;
}

}  // namespace ddprun::env
