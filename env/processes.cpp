#include "env/processes.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "base/read_file.hpp"
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

char StoppedState(pid_t pid) {
  const auto entry = ReadProcEntry(pid);
  return entry && (entry->state == 'T' || entry->state == 't') ? entry->state : 0;
}

const char* WhyStopped(char state) {
  return state == 't' ? "stopped by a debugger or tracer" : "stopped by a signal (SIGSTOP)";
}

std::optional<BlockedCall> ParseBlockedCall(std::string_view syscall) {
  long number = -1;
  unsigned long long a[3] = {};
  const std::string text(syscall);
  if (std::sscanf(text.c_str(), "%ld 0x%llx 0x%llx 0x%llx", &number, &a[0], &a[1], &a[2]) != 4) {
    return std::nullopt;
  }
  int fd_arg = -1;  // which argument is the descriptor written to
  switch (number) {
    case SYS_write:
    case SYS_writev:
    case SYS_pwrite64:
    case SYS_pwritev:
    case SYS_pwritev2:
    case SYS_sendfile:
      fd_arg = 0;
      break;
    case SYS_tee:
      fd_arg = 1;
      break;
    case SYS_splice:
    case SYS_copy_file_range:
      fd_arg = 2;
      break;
    case SYS_wait4:
    case SYS_waitid:
      return BlockedCall{BlockedCall::kWaitChild, -1};
    case SYS_read:
    case SYS_readv:
    case SYS_pread64:
    case SYS_preadv:
    case SYS_recvfrom:
    case SYS_recvmsg:
      if (a[0] > static_cast<unsigned long long>(INT_MAX)) return std::nullopt;
      return BlockedCall{BlockedCall::kWaitInput, static_cast<int>(a[0])};
    case SYS_ppoll:
    case SYS_pselect6:
    case SYS_epoll_pwait:
#ifdef SYS_poll  // not on every architecture (aarch64 has only the p- forms)
    case SYS_poll:
#endif
#ifdef SYS_select
    case SYS_select:
#endif
#ifdef SYS_epoll_wait
    case SYS_epoll_wait:
#endif
      return BlockedCall{BlockedCall::kWaitInput, -1};
    default:
      return std::nullopt;
  }
  const unsigned long long fd = a[fd_arg];
  if (fd > static_cast<unsigned long long>(INT_MAX)) return std::nullopt;
  return BlockedCall{BlockedCall::kWrite, static_cast<int>(fd)};
}

namespace {

std::string TaskPath(pid_t pid, pid_t tid, const char* file) {
  return "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid != 0 ? tid : pid) + "/" +
         file;
}

}  // namespace

std::optional<BlockedCall> ReadBlockedCall(pid_t pid, pid_t tid) {
  UniqueFd fd(open(TaskPath(pid, tid, "syscall").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char buf[256];
  const ssize_t n = read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return std::nullopt;
  return ParseBlockedCall(std::string_view(buf, static_cast<size_t>(n)));
}

namespace {

using FileKey = std::pair<dev_t, ino_t>;
constexpr int kMaxFds = 4096;  // a look stays cheap

// The access mode (O_RDONLY, O_WRONLY, O_RDWR) of `pid`'s descriptor
// `name`, from fdinfo's "flags:" (octal); -1 when it is gone.
int AccessMode(const std::string& proc, const char* name) {
  const std::string info = ReadSmallFile(proc + "/fdinfo/" + name, 256);
  const size_t at = info.find("flags:");
  if (at == std::string::npos) return -1;
  return static_cast<int>(std::strtoul(info.c_str() + at + 6, nullptr, 8) & O_ACCMODE);
}

// The files (pipes, FIFOs, sockets...) behind `pid`'s descriptor `fd`, or
// behind every one it holds open for reading when `fd` is -1 (what poll may
// wait on; not its output, which a child it started shares).
std::set<FileKey> FilesOf(pid_t pid, int fd) {
  std::set<FileKey> files;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd/";
  struct stat st {};
  if (fd >= 0) {
    if (stat((dir + std::to_string(fd)).c_str(), &st) == 0) files.emplace(st.st_dev, st.st_ino);
    return files;
  }
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  for (int n = 0; n < kMaxFds; ++n) {
    const dirent* e = readdir(d);
    if (e == nullptr) break;
    if (e->d_name[0] == '.') continue;
    const int mode = AccessMode("/proc/" + std::to_string(pid), e->d_name);
    if (mode != O_RDONLY && mode != O_RDWR) continue;
    if (stat((dir + e->d_name).c_str(), &st) == 0) files.emplace(st.st_dev, st.st_ino);
  }
  closedir(d);
  return files;
}

// Whether `pid` holds one of `files` open for writing: it may be what a
// process reading them waits for (the write end of its output pipe).
bool WritesToAny(pid_t pid, const std::set<FileKey>& files) {
  const std::string proc = "/proc/" + std::to_string(pid);
  DIR* d = opendir((proc + "/fd").c_str());
  if (d == nullptr) return false;
  bool writes = false;
  for (int n = 0; n < kMaxFds && !writes; ++n) {
    const dirent* e = readdir(d);
    if (e == nullptr) break;
    if (e->d_name[0] == '.') continue;
    struct stat st {};
    if (stat((proc + "/fd/" + e->d_name).c_str(), &st) != 0 ||
        files.count({st.st_dev, st.st_ino}) == 0) {
      continue;
    }
    const int mode = AccessMode(proc, e->d_name);
    writes = mode == O_WRONLY || mode == O_RDWR;
  }
  closedir(d);
  return writes;
}

}  // namespace

std::pair<pid_t, char> StoppedInTree(pid_t root, size_t limit) {
  std::vector<pid_t> queue{root};
  for (size_t i = 0; i < queue.size() && i < limit; ++i) {
    if (const char state = StoppedState(queue[i]); state != 0) return {queue[i], state};
    // The children of a process doing its own work (computing, in a collective) are not
    // where it waits: only those of one that waits for a child (a wrapper), or for input
    // that a child may write (a relay of its output, mp.spawn's pipes, DataLoader workers).
    const std::optional<BlockedCall> blocked = ReadBlockedCall(queue[i]);
    if (!blocked || blocked->kind == BlockedCall::kWrite) continue;
    const std::vector<pid_t> children = ChildrenOf(queue[i]);
    if (children.empty()) continue;
    // A child stopped beside a read of something it does not write is no pause: the reader
    // may be hung for its own reasons (attack 118: a stopped helper hid a real hang).
    std::set<FileKey> inputs;
    if (blocked->kind == BlockedCall::kWaitInput) inputs = FilesOf(queue[i], blocked->fd);
    for (const pid_t child : children) {
      if (blocked->kind == BlockedCall::kWaitChild || WritesToAny(child, inputs)) {
        queue.push_back(child);
      }
    }
  }
  return {0, 0};
}

std::vector<pid_t> ChildrenOf(pid_t pid, pid_t tid) {
  const std::string text = ReadSmallFile(TaskPath(pid, tid, "children"));
  std::vector<pid_t> out;
  for (const char* c = text.c_str(); *c != '\0';) {
    char* end = nullptr;
    const long child = std::strtol(c, &end, 10);
    if (end == c) break;
    if (child > 0) out.push_back(static_cast<pid_t>(child));
    c = end;
  }
  return out;
}

std::vector<pid_t> ThreadsOf(pid_t pid, size_t limit) {
  std::vector<pid_t> out;
  DIR* dir = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (dir == nullptr) return out;
  out.push_back(pid);
  while (out.size() < limit) {
    const dirent* e = readdir(dir);
    if (e == nullptr) break;
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || tid <= 0 || tid == pid) continue;
    out.push_back(static_cast<pid_t>(tid));
  }
  closedir(dir);
  return out;
}

std::string ThreadName(pid_t pid, pid_t tid) {
  std::string name = ReadSmallFile(TaskPath(pid, tid, "comm"), 64);
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
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

std::set<unsigned long> SocketInodes(pid_t pid) {
  std::set<unsigned long> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* fds = opendir(dir.c_str());
  if (fds == nullptr) return out;
  while (const dirent* e = readdir(fds)) {
    char target[64];
    const ssize_t n = readlinkat(dirfd(fds), e->d_name, target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) out.insert(inode);
  }
  closedir(fds);
  return out;
}

std::optional<unsigned long> ParseTcpLine(std::string_view line, int port) {
  // "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode"
  char remote[64];
  unsigned state = 0;
  unsigned long inode = 0;
  const std::string text(line);
  if (std::sscanf(text.c_str(), "%*s %*s %63s %x %*s %*s %*s %*s %*s %lu", remote, &state,
                  &inode) != 3) {
    return std::nullopt;
  }
  const char* colon = std::strrchr(remote, ':');
  constexpr unsigned kEstablished = 1;
  if (colon == nullptr || state != kEstablished || inode == 0) return std::nullopt;
  if (std::strtol(colon + 1, nullptr, 16) != port) return std::nullopt;
  return inode;
}

std::set<unsigned long> ConnectionsToPort(int port, const std::string& proc_root) {
  std::set<unsigned long> out;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    const std::string text = ReadSmallFile(proc_root + table);
    size_t start = text.find('\n');  // past the header
    while (start != std::string::npos && start + 1 < text.size()) {
      const size_t end = text.find('\n', start + 1);
      const std::string_view line(text.data() + start + 1,
                                  (end == std::string::npos ? text.size() : end) - start - 1);
      if (auto inode = ParseTcpLine(line, port)) out.insert(*inode);
      start = end;
    }
  }
  return out;
}

}  // namespace ddprun::env
