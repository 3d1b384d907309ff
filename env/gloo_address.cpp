#include "env/gloo_address.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/unique_fd.hpp"
#include "env/host.hpp"

namespace ddprun::env {

std::optional<NetAddress> GlooDefaultAddress(const std::string& hostname) {
  const AddrInfoList res = ResolveStream(hostname);
  for (const addrinfo* a = res.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) continue;
    int one = 1;
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* in =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, in, text, sizeof(text)) == nullptr) continue;
    return NetAddress{a->ai_family, text};
  }
  return std::nullopt;
}

namespace {

bool Loopback6(const in6_addr& a) {
  return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

}  // namespace

bool IsLoopback(const NetAddress& address) {
  if (address.family == AF_INET) return address.text.rfind("127.", 0) == 0;
  return LoopbackName(address.text);
}

bool LoopbackName(const std::string& host) {
  if (host == "localhost" || host.rfind("127.", 0) == 0) return true;
  std::string literal = host;
  if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']') {
    literal = literal.substr(1, literal.size() - 2);
  }
  in6_addr a{};
  return inet_pton(AF_INET6, literal.c_str(), &a) == 1 && Loopback6(a);
}

bool OnlyLoopback(const std::string& host) {
  const AddrInfoList res = ResolveStream(host);
  if (res == nullptr) return false;
  for (const addrinfo* a = res.get(); a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) return false;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      if (!Loopback6(in6->sin6_addr)) return false;
    }
  }
  return true;
}

namespace {

// Up (with a carrier when `running`), not loopback, with an address that
// reaches beyond the link (a link-local IPv6 address alone does not).
std::vector<std::string> Reachable(const std::vector<NetInterface>& interfaces, bool running) {
  std::vector<std::string> names;
  for (const auto& i : interfaces) {
    const unsigned want = running ? unsigned{IFF_UP} | unsigned{IFF_RUNNING} : unsigned{IFF_UP};
    if ((i.flags & want) != want || (i.flags & IFF_LOOPBACK) != 0) continue;
    for (const auto& a : i.addresses) {
      if (IsLoopback(a) || (a.family == AF_INET6 && a.text.rfind("fe80:", 0) == 0)) continue;
      names.push_back(i.name);
      break;
    }
  }
  return names;
}

}  // namespace

std::string GlooIfnameChoices(const std::vector<NetInterface>& interfaces) {
  // Those with a carrier; else those up (a veth's carrier flag is not
  // always kept, e.g. under gVisor, where it carries traffic all the same).
  std::vector<std::string> names = Reachable(interfaces, true);
  if (names.empty()) names = Reachable(interfaces, false);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return out;
}

LimitCheck GlooAddressCheck(const std::string& hostname, const std::optional<NetAddress>& address,
                            const std::vector<NetInterface>& interfaces, bool gloo_ifname_set,
                            bool multi_node) {
  LimitCheck c{"Gloo's address", CheckStatus::kOk, "", ""};
  if (gloo_ifname_set) {
    c.measured = "GLOO_SOCKET_IFNAME chooses it (checked above)";
    return c;
  }
  if (address && !IsLoopback(*address)) {
    c.measured = "host name " + hostname + " resolves to " + address->text +
                 ", which Gloo tells the other ranks to connect to";
    return c;
  }
  c.measured = "host name " + hostname +
               (address ? " resolves to " + address->text + ", a loopback address"
                        : " resolves to no address of this host: Gloo falls back to 127.0.0.1") +
               ": PyTorch's Gloo, with GLOO_SOCKET_IFNAME unset, tells the other ranks to "
               "connect there, which only ranks of this host can";
  if (!multi_node) {
    c.measured += " (enough while every node runs on this host)";
    return c;
  }
  c.status = CheckStatus::kWarn;
  c.measured += ": ranks on other nodes fail to connect (Connection refused)";
  const std::string choices = GlooIfnameChoices(interfaces);
  const bool one = !choices.empty() && choices.find(' ') == std::string::npos;
  c.fix = (choices.empty() ? std::string("bring up an interface the other nodes reach, then set "
                                         "GLOO_SOCKET_IFNAME to it")
           : one           ? "export GLOO_SOCKET_IFNAME=" + choices
                 : "export GLOO_SOCKET_IFNAME=NAME, the interface the other nodes reach this one "
                   "by (here " +
                       choices + ")") +
          " on every node (ddprun passes it to the workers), or map " + hostname +
          " to its network address in /etc/hosts";
  return c;
}

}  // namespace ddprun::env
