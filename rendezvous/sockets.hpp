// Small POSIX socket helpers shared by the store server and client:
// resolving, binding a listener, connecting with a deadline.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>

#include "base/status.hpp"
#include "base/unique_fd.hpp"

namespace ddprun::rendezvous {

using Clock = std::chrono::steady_clock;

// A listening TCP socket on host:port (SO_REUSEADDR). host "" binds "::"
// dual-stack, falling back to 0.0.0.0. EADDRINUSE comes back as kUnavailable
// with what to do.
StatusOr<UniqueFd> BindListener(const std::string& host, int port);

// The port a bound socket has.
int LocalPort(int fd);

// "127.0.0.1" or "::1" (IPv4-mapped IPv6 addresses are shown as IPv4).
std::string AddressString(const sockaddr_storage& addr);

// Asked between connection attempts: true ends the wait (ddprun got a
// terminating signal).
using Interrupted = std::function<bool()>;

// A connected, blocking TCP socket with TCP_NODELAY. Retries refused and
// reset connections (a store that is not up yet) until `deadline`, or until
// `interrupted` says so (kAborted); a host that does not resolve fails at once.
StatusOr<UniqueFd> ConnectWithRetry(const std::string& host, int port, Clock::time_point deadline,
                                    const Interrupted& interrupted = {});

// "host:port", with brackets around IPv6 literals.
std::string HostPort(const std::string& host, int port);

// Splits "host[:port]" / "[v6]:port" / a bare v6 address; `default_port` when
// none is given. Refuses a host that is neither a name nor an IP address.
Status SplitHostPort(const std::string& endpoint, int default_port, std::string* host, int* port);
// A host name or IPv4 address (letters, digits, '.', '-', '_'), or an IPv6
// literal that inet_pton reads, maybe with a zone (fe80::1%eth0).
bool IsHost(const std::string& host);

}  // namespace ddprun::rendezvous
