// Where the kernel put a crashed worker's core dump, by core(5)'s rules:
// /proc/sys/kernel/core_pattern is either a path template (relative to the
// process's working directory; %p its pid, %h the host, %t the time, ...,
// and ".PID" appended when core_uses_pid is 1 and the template has no %p) or
// "|program", a handler the kernel pipes the core to (systemd-coredump,
// apport, a container host's own).
//
// ExpandCorePattern is pure; DescribeCoreDump reads the file system to find
// the file. Thread-compatible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ddprun::env {

struct CorePattern {
  std::string pattern = "core";  // /proc/sys/kernel/core_pattern, trailing newline removed
  bool uses_pid = false;         // /proc/sys/kernel/core_uses_pid
};

CorePattern ReadCorePattern(const std::string& proc_root = "/proc");

// What fills a path template's specifiers; what is unknown becomes '*'.
struct CoreOwner {
  pid_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int signal = 0;
  std::string host;
  std::string cwd;  // the process's working directory, absolute
  // A file last written before this (seconds since the epoch) is an older
  // crash's, not this one's.
  int64_t written_after = 0;
};

// The glob that matches the core file of `owner` (absolute), or "" when the
// pattern pipes the core to a program.
std::string ExpandCorePattern(const CorePattern& p, const CoreOwner& owner);

// One line for the failure report of a worker whose wait status said "core
// dumped": "/work/core.1234 (31.2 MiB)", "piped to systemd-coredump:
// coredumpctl gdb 1234", or where it was expected when no file is there.
std::string DescribeCoreDump(const CorePattern& p, const CoreOwner& owner);

}  // namespace ddprun::env
