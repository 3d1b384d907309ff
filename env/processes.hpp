// The processes of this host as /proc shows them: parent, session, state and
// start time of each, and the tree below a process.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::env {

struct ProcEntry {
  pid_t pid = 0;
  char state = 0;  // R, S, D, Z, T...
  pid_t ppid = 0;
  pid_t session = 0;
  unsigned long long start_time = 0;  // clock ticks after boot: with the pid, one process
  bool operator==(const ProcEntry& o) const {
    return pid == o.pid && ppid == o.ppid && session == o.session && start_time == o.start_time;
  }
};

// "pid (comm) state ppid pgrp session ... starttime ..." as /proc/<pid>/stat
// holds it (comm may hold spaces and parentheses); nullopt when malformed.
std::optional<ProcEntry> ParseProcStat(std::string_view stat);
// /proc/<pid>/stat of one process; nullopt when it is gone.
std::optional<ProcEntry> ReadProcEntry(pid_t pid);
// 'T' (stopped by a signal) or 't' (by a debugger or tracer) when `pid` is
// stopped; 0 when it runs or is gone.
char StoppedState(pid_t pid);
// Why a process in StoppedState `state` is stopped: "stopped by a signal
// (SIGSTOP)" or "stopped by a debugger or tracer".
const char* WhyStopped(char state);
// What a thread is blocked in, from its /proc/<pid>/syscall text ("1 0x2
// 0x7f... ..." on x86-64: the call's number and arguments): a write to a
// descriptor (write, writev, pwrite, sendfile, splice, tee, copy_file_range:
// `fd` is the one written to), or a wait for a child (wait4, waitid).
struct BlockedCall {
  // kWaitInput: read, recv, poll, select, epoll_wait (a relay of a child's
  // output, torch.multiprocessing.spawn waiting on its children's pipes).
  enum Kind { kWrite, kWaitChild, kWaitInput } kind = kWrite;
  int fd = -1;  // kWrite; kWaitInput: the one read (read, recv), -1 for poll and the like
};
// nullopt when it is in no such call (running, another call, malformed).
std::optional<BlockedCall> ParseBlockedCall(std::string_view syscall);
// The same for thread `tid` of `pid`, its main thread when `tid` is 0
// (nullopt also when it is gone or its syscall file may not be read).
std::optional<BlockedCall> ReadBlockedCall(pid_t pid, pid_t tid = 0);
// The children that thread `tid` of `pid` started (its main thread when 0):
// /proc/<pid>/task/<tid>/children.
std::vector<pid_t> ChildrenOf(pid_t pid, pid_t tid = 0);
// `root`, or the program it runs under it as a wrapper does, when stopped
// (StoppedState), with that state; {0, 0} when none is. A worker that runs
// its program under a wrapper (a shell script without exec) is stopped when
// that program is. Only the children of a process that waits for them
// (wait4, waitid), or for input that they write (a relay reading its
// child's output, mp.spawn polling its children's pipes: the child holds the
// pipe read, or one of those polled, open for writing) are looked at, at
// most `limit` processes:
// two reads per worker otherwise (the pause watch looks twice a second).
std::pair<pid_t, char> StoppedInTree(pid_t root, size_t limit = 64);
// The threads of `pid` (/proc/<pid>/task), its main thread first, at most
// `limit` of them; empty when it is gone.
std::vector<pid_t> ThreadsOf(pid_t pid, size_t limit);
// A thread's name (/proc/<pid>/task/<tid>/comm), empty when it is gone.
std::string ThreadName(pid_t pid, pid_t tid);
// Every process /proc lists now (those that vanish while it is read are left out).
std::vector<ProcEntry> ReadProcTable();
// The processes below `root` in `table`: its children, theirs, and so on;
// `root` itself not included. Parents come before their children.
std::vector<ProcEntry> Descendants(const std::vector<ProcEntry>& table, pid_t root);

// The inodes of the sockets `pid` holds open (its /proc/<pid>/fd links
// "socket:[N]"); empty when it is gone.
std::set<unsigned long> SocketInodes(pid_t pid);
// The inodes of this host's established TCP connections (IPv4 and IPv6) to
// port `port` at the other end, from `proc_root`/net/tcp and tcp6.
std::set<unsigned long> ConnectionsToPort(int port, const std::string& proc_root = "/proc");
// One line of /proc/net/tcp: the connection's inode when it is established
// and its remote port is `port`.
std::optional<unsigned long> ParseTcpLine(std::string_view line, int port);

}  // namespace ddprun::env
