// Which process listens on a TCP port of this host: the listening socket's
// inode from /proc/net/tcp and tcp6, then the process with an fd on it.
//
// Best effort: processes of other users are unreadable unless ddprun runs as
// root. Thread-compatible; reads /proc only.
#pragma once

#include <string>

namespace ddprun::env {

// "COMMAND (pid N)" of a process listening on `port`, or "" when none is
// found (nothing listens, or the holder's fds are not readable).
std::string PortHolder(int port, const std::string& proc_root = "/proc");

}  // namespace ddprun::env
