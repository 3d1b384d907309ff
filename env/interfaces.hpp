// This host's network interfaces, and which of them the socket-interface
// variables of Gloo and NCCL select, by each library's own rules:
//  - GLOO_SOCKET_IFNAME (PyTorch's ProcessGroupGloo): interface names, comma
//    separated, each exactly a name with an IPv4 or IPv6 address; a value of
//    one character or none is ignored. Anything else fails init_process_group
//    with "Unable to find address for: NAME".
//  - NCCL_SOCKET_IFNAME: name prefixes, comma separated, each optionally with
//    ":port"; a leading '^' excludes the listed prefixes instead, then a
//    leading '=' makes them exact names. Only interfaces with an address of
//    NCCL_SOCKET_FAMILY (AF_INET, AF_INET6; unset: either) count, not ::1.
//    None selected fails NCCL's bootstrap with "no socket interface found".
//    A value of one character or none is ignored here too.
// A wrong value is the classic multi-node failure (interface names differ
// from host to host): the launcher checks it before any worker starts, the
// doctor reports it, and the failure report explains it.
//
// Pure functions but ListInterfaces (getifaddrs); thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/environ.hpp"
#include "env/limits.hpp"

namespace ddprun::env {

struct NetAddress {
  int family = 0;    // AF_INET or AF_INET6
  std::string text;  // "10.0.0.5", "fe80::1"
};

struct NetInterface {
  std::string name;
  unsigned flags = 0;  // IFF_*
  std::vector<NetAddress> addresses;
};

// Every interface getifaddrs() lists, in its order, with its IP addresses.
std::vector<NetInterface> ListInterfaces();

// "lo 127.0.0.1, eth0 10.0.0.5": the interfaces that have an address, each
// with its first one; "none" when no interface has one.
std::string DescribeInterfaces(const std::vector<NetInterface>& interfaces);

// nullopt when `value` (GLOO_SOCKET_IFNAME) selects interfaces Gloo can use;
// otherwise why not, naming the entry ("eth9 is no interface of this host").
std::optional<std::string> GlooIfnameProblem(const std::string& value,
                                             const std::vector<NetInterface>& interfaces);

// nullopt when `value` (NCCL_SOCKET_IFNAME) with `family` (NCCL_SOCKET_FAMILY,
// "" when unset) selects at least one interface; otherwise why none.
std::optional<std::string> NcclIfnameProblem(const std::string& value, const std::string& family,
                                             const std::vector<NetInterface>& interfaces);

// The InfiniBand devices of /sys/class/infiniband under `sys_root`, sorted.
std::vector<std::string> ListIbDevices(const std::string& sys_root = "/sys");

// nullopt when `value` (NCCL_IB_HCA, NCCL's list syntax over device names)
// selects one of `devices`; otherwise why none.
std::optional<std::string> NcclHcaProblem(const std::string& value,
                                          const std::vector<std::string>& devices);

// One check per variable set in `environ`: GLOO_SOCKET_IFNAME and
// NCCL_SOCKET_IFNAME against `interfaces` (fail: init_process_group would
// fail), NCCL_IB_HCA against `ib_devices` (warn: NCCL would fall back to
// sockets); ok with what it selects, else why and what to set instead.
// `gpus` is what the workers see (-1: unknown): with none, NCCL is not used
// and a wrong NCCL_SOCKET_IFNAME only warns.
std::vector<LimitCheck> SocketInterfaceChecks(const Environ& environ,
                                              const std::vector<NetInterface>& interfaces,
                                              const std::vector<std::string>& ib_devices,
                                              int gpus = -1);

}  // namespace ddprun::env
