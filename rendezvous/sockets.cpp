#include "rendezvous/sockets.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <thread>

#include "base/parse.hpp"

namespace ddprun::rendezvous {

namespace {

using AddrList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

StatusOr<AddrList> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : AI_ADDRCONFIG);
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc == EAI_SYSTEM) return ErrnoStatus("resolve " + host, errno);  // e.g. out of fds
  if (rc != 0) {
    return Unavailable("resolve " + host + ": " + gai_strerror(rc) +
                       ": check the host name (or use an IP address)");
  }
  return AddrList(res, freeaddrinfo);
}

Status BindOne(int fd, const addrinfo* ai) {
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (ai->ai_family == AF_INET6) {
    int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    int err = errno;
    if (err == EADDRINUSE) {
      return Unavailable(
          "address already in use: another store or job holds this port; pick "
          "another port or stop that job");
    }
    return ErrnoStatus("bind", err);
  }
  if (listen(fd, SOMAXCONN) != 0) return ErrnoStatus("listen", errno);
  return Status::Ok();
}

}  // namespace

StatusOr<UniqueFd> BindListener(const std::string& host, int port) {
  auto addrs = Resolve(host, port, /*passive=*/true);
  if (!addrs.ok()) return addrs.status();
  // Passive resolution of "" lists 0.0.0.0 before ::; prefer :: (dual-stack).
  Status last = Unavailable("no address to bind");
  for (int family : {AF_INET6, AF_INET}) {
    for (addrinfo* ai = addrs->get(); ai != nullptr; ai = ai->ai_next) {
      if (ai->ai_family != family) continue;
      UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0));
      if (!fd.valid() && (errno == EMFILE || errno == ENFILE || errno == ENOMEM)) {
        return ErrnoStatus("socket", errno);
      }
      if (!fd.valid()) continue;  // e.g. no IPv6 here: the next family
      last = BindOne(fd.get(), ai);
      if (last.ok()) return fd;
      if (last.code() == StatusCode::kUnavailable) return last;
    }
  }
  return last;
}

int LocalPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

std::string AddressString(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, buf, sizeof(buf));
    return buf;
  }
  const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&addr);
  if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
    inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], buf, sizeof(buf));
    return buf;
  }
  inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof(buf));
  return buf;
}

std::string HostPort(const std::string& host, int port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool IsHost(const std::string& host) {
  if (host.find(':') != std::string::npos) {
    in6_addr addr{};
    const std::string address = host.substr(0, host.find('%'));  // without a zone: fe80::1%eth0
    return inet_pton(AF_INET6, address.c_str(), &addr) == 1;
  }
  if (host.empty()) return false;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

Status SplitHostPort(const std::string& endpoint, int default_port, std::string* host, int* port) {
  std::string rest;
  if (!endpoint.empty() && endpoint[0] == '[') {
    auto close = endpoint.find(']');
    if (close == std::string::npos) return InvalidArgument("unclosed [");
    *host = endpoint.substr(1, close - 1);
    rest = endpoint.substr(close + 1);
  } else {
    const auto colon = endpoint.rfind(':');
    const bool bare_v6 = colon != std::string::npos && endpoint.find(':') != colon;
    // An IPv6 address without brackets: torchrun takes what follows the last
    // colon for the port (::1:29400), so does ddprun when what precedes it is
    // an address; else the whole is the address (::1, fe80::1), default port.
    const bool v6_port = bare_v6 && IsHost(endpoint.substr(0, colon)) &&
                         colon + 1 < endpoint.size() &&
                         endpoint.find_first_not_of("0123456789", colon + 1) == std::string::npos;
    const bool whole = colon == std::string::npos || (bare_v6 && !v6_port);
    *host = whole ? endpoint : endpoint.substr(0, colon);
    rest = whole ? "" : endpoint.substr(colon);
  }
  if (host->empty()) return InvalidArgument("no host");
  if (!IsHost(*host)) {
    return InvalidArgument("the host is neither a host name nor an IP address");
  }
  *port = default_port;
  if (rest.empty()) return Status::Ok();
  auto p = rest[0] == ':' ? ParseInteger("port", rest.substr(1), 0, 65535, "")
                          : StatusOr<long long>(InvalidArgument("junk after the address"));
  if (!p.ok()) return InvalidArgument("the port is not a number from 0 to 65535");
  *port = static_cast<int>(*p);
  return Status::Ok();
}

namespace {

// One non-blocking connect attempt, bounded by `deadline`.
Status ConnectOnce(const addrinfo* ai, Clock::time_point deadline, UniqueFd* out) {
  UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return ErrnoStatus("connect", errno);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd.get(), POLLOUT, 0};
    int rc = poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (rc == 0) return Status(StatusCode::kDeadlineExceeded, "connect: timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return ErrnoStatus("connect", err);
  }
  int flags = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &flags, sizeof(flags));
  int fl = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  *out = std::move(fd);
  return Status::Ok();
}

}  // namespace

StatusOr<UniqueFd> ConnectWithRetry(const std::string& host, int port, Clock::time_point deadline,
                                    const Interrupted& interrupted) {
  auto addrs = Resolve(host, port, /*passive=*/false);
  if (!addrs.ok()) return addrs.status();
  auto delay = std::chrono::milliseconds(10);
  Status last = Unavailable("no address");
  while (true) {
    for (addrinfo* ai = addrs->get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd;
      last = ConnectOnce(ai, deadline, &fd);
      if (last.ok()) return fd;
      if (last.code() == StatusCode::kUnavailable) return last;  // out of fds: waiting won't help
    }
    if (Clock::now() + delay >= deadline) break;
    if (interrupted && interrupted()) return Status(StatusCode::kAborted, "interrupted");
    std::this_thread::sleep_for(delay);  // backoff between attempts on a store not up yet
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
  return Status(StatusCode::kDeadlineExceeded, last.message() + " (gave up at the deadline)");
}

}  // namespace ddprun::rendezvous
