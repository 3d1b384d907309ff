// Facts about this host that the launcher needs before spawning: names (the
// CPUs are env/cpus.hpp, the GPUs env/gpus.hpp).
#pragma once

#include <netdb.h>

#include <memory>
#include <string>

namespace ddprun::env {

// gethostname(), or "localhost" if that fails.
std::string Hostname();

// The kernel's range of ports for outgoing connections, for a message:
// "32768-60999, /proc/sys/net/ipv4/ip_local_port_range" (the path alone when
// it cannot be read).
std::string EphemeralPortRange();

// The fully qualified name as Python's socket.getfqdn() gives it: the
// canonical name of the host name, else the host name itself.
std::string Fqdn();

// Whether `host` (a name or an address) resolves here (getaddrinfo).
bool Resolves(const std::string& host);

// getaddrinfo(host) for stream sockets of any family; null when it does not
// resolve.
using AddrInfoList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;
AddrInfoList ResolveStream(const std::string& host);

}  // namespace ddprun::env
