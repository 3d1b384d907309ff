#include "env/host.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>

namespace ddprun::env {

std::string EphemeralPortRange() {
  constexpr char kPath[] = "/proc/sys/net/ipv4/ip_local_port_range";
  std::ifstream in(kPath);
  int low = 0, high = 0;
  if (!(in >> low >> high)) return kPath;
  return std::to_string(low) + "-" + std::to_string(high) + ", " + kPath;
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

AddrInfoList ResolveStream(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) res = nullptr;
  return {res, freeaddrinfo};
}

bool Resolves(const std::string& host) { return ResolveStream(host) != nullptr; }

std::string Fqdn() {
  // Python's socket.getfqdn(): gethostbyaddr(gethostname()), then the first of
  // the primary name and its aliases that contains a dot, else the primary name.
  std::string host = Hostname();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return host;
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
  const void* addr = nullptr;
  socklen_t len = 0;
  if (res->ai_family == AF_INET) {
    addr = &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    len = sizeof(in_addr);
  } else {
    addr = &reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr;
    len = sizeof(in6_addr);
  }
  hostent entry{};
  hostent* found = nullptr;
  char buf[8192];
  int err = 0;
  if (gethostbyaddr_r(addr, len, res->ai_family, &entry, buf, sizeof(buf), &found, &err) != 0 ||
      found == nullptr) {
    return host;
  }
  std::string primary = found->h_name;
  if (primary.find('.') != std::string::npos) return primary;
  for (char** alias = found->h_aliases; alias != nullptr && *alias != nullptr; ++alias) {
    if (std::string(*alias).find('.') != std::string::npos) return *alias;
  }
  return primary;
}

}  // namespace ddprun::env
