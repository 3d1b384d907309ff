// The processes of this host as /proc shows them: parent, session, state and
// start time of each, and the tree below a process.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string_view>
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
// What a thread is blocked in, from its /proc/<pid>/syscall text ("1 0x2
// 0x7f... ..." on x86-64: the call's number and arguments): a write to a
// descriptor (write, writev, pwrite, sendfile, splice, tee, copy_file_range:
// `fd` is the one written to), or a wait for a child (wait4, waitid).
struct BlockedCall {
  enum Kind { kWrite, kWaitChild } kind = kWrite;
  int fd = -1;  // kWrite
};
// nullopt when it is in no such call (running, another call, malformed).
std::optional<BlockedCall> ParseBlockedCall(std::string_view syscall);
// The same for the main thread of `pid` (nullopt also when it is gone or
// its syscall file may not be read).
std::optional<BlockedCall> ReadBlockedCall(pid_t pid);
// The children of the main thread of `pid` (/proc/<pid>/task/<pid>/children).
std::vector<pid_t> ChildrenOf(pid_t pid);
// Every process /proc lists now (those that vanish while it is read are left out).
std::vector<ProcEntry> ReadProcTable();
// The processes below `root` in `table`: its children, theirs, and so on;
// `root` itself not included. Parents come before their children.
std::vector<ProcEntry> Descendants(const std::vector<ProcEntry>& table, pid_t root);

}  // namespace ddprun::env
