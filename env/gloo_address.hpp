// The address PyTorch's Gloo tells its peers to connect to when
// GLOO_SOCKET_IFNAME is unset: ProcessGroupGloo's default device resolves the
// host name (gethostname) and takes the first address it resolves to that a
// socket can bind (gloo's lookupAddrForHostname); only when none binds does
// it fall back to 127.0.0.1, with the warning "Unable to resolve hostname to
// a (local) address". A host name that /etc/hosts maps to a loopback address
// (Debian and Ubuntu write "127.0.1.1 HOSTNAME") binds, silently: every rank
// of that host then advertises loopback, and a peer on another node fails
// to connect ("Connection refused, remote=[127.0.1.1]"). NCCL picks its
// interfaces by its own rules and is not affected.
//
// GlooDefaultAddress resolves and binds; the rest is pure. Thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/interfaces.hpp"
#include "env/limits.hpp"

namespace ddprun::env {

// As Gloo chooses it; nullopt when no address of `hostname` binds.
std::optional<NetAddress> GlooDefaultAddress(const std::string& hostname);

// 127.0.0.0/8, ::1 or ::ffff:127.x.y.z, in any spelling.
bool IsLoopback(const NetAddress& address);

// `host` names this host's loopback without resolving it: "localhost", an
// address of 127.0.0.0/8, or ::1 in any spelling ("0:0:0:0:0:0:0:1",
// "[::1]", "::ffff:127.0.0.1").
bool LoopbackName(const std::string& host);

// Every address `host` resolves to is loopback ("localhost", "127.0.0.1"): a
// store there is reached from this host only, so every node of its job runs
// here. False when it does not resolve.
bool OnlyLoopback(const std::string& host);

// What to set GLOO_SOCKET_IFNAME to on this host: the one interface that is up
// and running with an address other than loopback ("eth0"), or each such one
// ("eth0 or ib0"); where none has a carrier, those up; "" when there is none.
std::string GlooIfnameChoices(const std::vector<NetInterface>& interfaces);

// The doctor's and the launcher's check of it. Ok when GLOO_SOCKET_IFNAME is
// set (`gloo_ifname_set`) or the address is reachable from elsewhere; when
// Gloo would advertise loopback, warn for a multi-node job (`multi_node`),
// else say so as ok (one node: loopback reaches every rank).
LimitCheck GlooAddressCheck(const std::string& hostname, const std::optional<NetAddress>& address,
                            const std::vector<NetInterface>& interfaces, bool gloo_ifname_set,
                            bool multi_node);

}  // namespace ddprun::env
