// Load generator for TCPStore-compatible servers (ddprun's and PyTorch's),
// driven by ddprun's own StoreClient so both servers see the same client.
//
//   store_bench ops   HOST PORT CLIENTS SECONDS
//       CLIENTS threads, each with its own connection, loop SET k_<i>, GET
//       k_<i> (StoreClient::Get is WAIT + GET: two round trips), ADD c 1 for
//       SECONDS. Prints one `ops <name> <count> <ops/s>` line per op type and
//       for the total, and checks the final counter equals the ADDs done.
//   store_bench fanin HOST PORT N
//       Opens N validated connections (raw sockets, the same bytes as
//       StoreClient, up to 256 handshakes in flight), each sends WAIT "go" then PING (the PING echo
//       proves the server registered the WAIT); then one StoreClient SETs "go". Prints the time
//       from just before the SET to the last of the N STOP_WAITING bytes.
//   store_bench idle  HOST PORT N
//       Opens N connections (StoreClient's VALIDATE + PING, echo checked), prints
//       `ready` and holds them until stdin closes.
//
// Exit status: 0 when every check passed, 1 otherwise, 2 on bad usage.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store_client.hpp"
#include "rendezvous/store_protocol.hpp"

using ddprun::rendezvous::Encoder;
using ddprun::rendezvous::Op;
using ddprun::rendezvous::StoreClient;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr auto kTimeout = std::chrono::milliseconds(120000);

void RaiseFdLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

int Ops(const std::string& host, int port, int clients, double seconds) {
  // A counter key unique to this invocation, so repeated runs against one
  // server each start from zero.
  const std::string counter = "c_" + std::to_string(getpid()) + "_" +
                              std::to_string(SteadyClock::now().time_since_epoch().count());
  std::vector<StoreClient> conns;
  for (int i = 0; i < clients; ++i) {
    auto c = StoreClient::Connect(host, port, kTimeout);
    if (!c.ok()) {
      std::fprintf(stderr, "connect: %s\n", c.status().message().c_str());
      return 1;
    }
    conns.push_back(std::move(*c));
  }
  struct Counts {
    uint64_t set = 0, get = 0, add = 0;
    bool failed = false;
    std::string error;
  };
  std::vector<Counts> counts(clients);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  SteadyClock::time_point deadline;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      StoreClient& c = conns[i];
      Counts& n = counts[i];
      const std::string key = "k_" + std::to_string(i) + "_" + counter;
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (uint64_t iter = 0; SteadyClock::now() < deadline; ++iter) {
        const std::string value = "value-" + std::to_string(iter);
        if (auto s = c.Set(key, value); !s.ok()) {
          n.failed = true, n.error = s.message();
          return;
        }
        ++n.set;
        auto got = c.Get(key);
        if (!got.ok() || *got != value) {
          n.failed = true;
          n.error = got.ok() ? "GET returned " + *got + ", want " + value : got.status().message();
          return;
        }
        ++n.get;
        auto added = c.Add(counter, 1);
        if (!added.ok()) {
          n.failed = true, n.error = added.status().message();
          return;
        }
        ++n.add;
      }
    });
  }
  while (ready.load() < clients) std::this_thread::yield();
  const auto start = SteadyClock::now();
  deadline = start + std::chrono::duration_cast<SteadyClock::duration>(
                         std::chrono::duration<double>(seconds));
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  const double elapsed = Seconds(SteadyClock::now() - start);

  Counts total;
  bool ok = true;
  for (const auto& n : counts) {
    total.set += n.set, total.get += n.get, total.add += n.add;
    if (n.failed) {
      std::fprintf(stderr, "client failed: %s\n", n.error.c_str());
      ok = false;
    }
  }
  auto final_value = conns[0].Add(counter, 0);
  if (!final_value.ok()) {
    std::fprintf(stderr, "final ADD: %s\n", final_value.status().message().c_str());
    ok = false;
  } else if (static_cast<uint64_t>(*final_value) != total.add) {
    std::fprintf(stderr, "counter is %lld, but %llu ADDs were done\n",
                 static_cast<long long>(*final_value), static_cast<unsigned long long>(total.add));
    ok = false;
  }
  std::printf("elapsed %.6f\n", elapsed);
  std::printf("ops set %llu %.1f\n", static_cast<unsigned long long>(total.set),
              total.set / elapsed);
  std::printf("ops get %llu %.1f\n", static_cast<unsigned long long>(total.get),
              total.get / elapsed);
  std::printf("ops add %llu %.1f\n", static_cast<unsigned long long>(total.add),
              total.add / elapsed);
  const uint64_t all = total.set + total.get + total.add;
  std::printf("ops total %llu %.1f\n", static_cast<unsigned long long>(all), all / elapsed);
  std::printf("counter_ok %d\n", ok ? 1 : 0);
  return ok ? 0 : 1;
}

bool SendFull(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Opens n connections, at most `window` handshakes in flight at a time; on
// each, sends `hello` right after connect and reads `expect` bytes back, which
// must equal `want`. Sequential handshakes would be far slower: PyTorch's
// server answers some handshakes only after a delay (seen: 100 ms to 5 s).
bool OpenMany(const std::string& host, int port, int n, const std::string& hello,
              const std::string& want, std::vector<int>* fds) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    std::fprintf(stderr, "need an IPv4 address, got %s\n", host.c_str());
    return false;
  }
  constexpr int kWindow = 256;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct Pending {
    int fd;
    std::string got;
    bool sent;
  };
  std::vector<Pending> pending(n);
  int started = 0, done = 0, in_flight = 0;
  const auto give_up = SteadyClock::now() + std::chrono::seconds(300);
  bool ok = true;
  auto start_one = [&](int i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      std::fprintf(stderr, "socket %d: %s\n", i, std::strerror(errno));
      return false;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
        errno != EINPROGRESS) {
      std::fprintf(stderr, "connect %d: %s\n", i, std::strerror(errno));
      ::close(fd);
      return false;
    }
    pending[i] = Pending{fd, "", false};
    fds->push_back(fd);
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    ++in_flight;
    return true;
  };
  epoll_event events[512];
  while (ok && done < n) {
    while (started < n && in_flight < kWindow) {
      if (!start_one(started++)) ok = false;
    }
    if (!ok) break;
    if (SteadyClock::now() > give_up) {
      std::fprintf(stderr, "handshakes: %d of %d done after 300 s\n", done, n);
      ok = false;
      break;
    }
    int k = epoll_wait(ep, events, 512, 1000);
    for (int j = 0; j < k && ok; ++j) {
      Pending& p = pending[events[j].data.u32];
      if (!p.sent && (events[j].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0 || !SendFull(p.fd, hello)) {
          std::fprintf(stderr, "connection %u: %s\n", events[j].data.u32,
                       std::strerror(err ? err : errno));
          ok = false;
          break;
        }
        p.sent = true;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = events[j].data.u32;
        epoll_ctl(ep, EPOLL_CTL_MOD, p.fd, &ev);
        continue;
      }
      if (p.sent && (events[j].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
        char buf[64];
        ssize_t r = ::recv(p.fd, buf, std::min(sizeof(buf), want.size() - p.got.size()), 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) {
          std::fprintf(stderr, "connection %u closed during the handshake\n", events[j].data.u32);
          ok = false;
          break;
        }
        p.got.append(buf, static_cast<size_t>(r));
        if (p.got.size() == want.size()) {
          if (p.got != want) {
            std::fprintf(stderr, "connection %u: wrong PING echo\n", events[j].data.u32);
            ok = false;
            break;
          }
          epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, nullptr);
          // Back to blocking mode for the callers.
          fcntl(p.fd, F_SETFL, fcntl(p.fd, F_GETFL) & ~O_NONBLOCK);
          --in_flight, ++done;
        }
      }
    }
  }
  ::close(ep);
  return ok;
}

int Fanin(const std::string& host, int port, int n) {
  RaiseFdLimit();
  const std::string go_key = "go_" + std::to_string(getpid()) + "_" +
                             std::to_string(SteadyClock::now().time_since_epoch().count());
  const uint32_t nonce = static_cast<uint32_t>(getpid());
  std::vector<int> fds;
  fds.reserve(n);
  auto cleanup = [&] {
    for (int fd : fds) ::close(fd);
  };
  const auto setup_start = SteadyClock::now();
  // The bytes StoreClient::Connect and StoreClient::Wait send, plus a PING
  // after the WAIT: its echo proves the server has registered the WAIT.
  Encoder e;
  e.Op(Op::kValidate).U32(ddprun::rendezvous::kValidateMagic).Op(Op::kPing).U32(nonce);
  e.Op(Op::kWait).U64(1).Str("/" + go_key).Op(Op::kPing).U32(nonce);
  Encoder want;
  want.U32(nonce).U32(nonce);
  if (!OpenMany(host, port, n, e.bytes(), want.bytes(), &fds)) {
    cleanup();
    return 1;
  }
  const double setup = Seconds(SteadyClock::now() - setup_start);

  int ep = epoll_create1(EPOLL_CLOEXEC);
  for (int i = 0; i < n; ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0) {
      std::fprintf(stderr, "epoll_ctl: %s\n", std::strerror(errno));
      cleanup();
      return 1;
    }
  }
  auto setter = StoreClient::Connect(host, port, kTimeout);
  if (!setter.ok()) {
    std::fprintf(stderr, "setter: %s\n", setter.status().message().c_str());
    cleanup();
    return 1;
  }
  // Nothing must be readable yet: no waiter may have been released early.
  epoll_event events[1024];
  if (int early = epoll_wait(ep, events, 1024, 0); early != 0) {
    std::fprintf(stderr, "%d waiters were readable before the SET\n", early);
    cleanup();
    return 1;
  }

  std::vector<uint8_t> got(n, 0);
  int received = 0, wrong = 0;
  const auto t0 = SteadyClock::now();
  if (auto s = setter->Set(go_key, "1"); !s.ok()) {
    std::fprintf(stderr, "SET: %s\n", s.message().c_str());
    cleanup();
    return 1;
  }
  const auto give_up = t0 + std::chrono::seconds(120);
  while (received < n && SteadyClock::now() < give_up) {
    int k = epoll_wait(ep, events, 1024, 1000);
    for (int j = 0; j < k; ++j) {
      uint32_t i = events[j].data.u32;
      uint8_t b[8];
      ssize_t r = ::recv(fds[i], b, sizeof(b), 0);
      if (r <= 0) {
        std::fprintf(stderr, "connection %u closed before STOP_WAITING\n", i);
        epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], nullptr);
        ++wrong, ++received;
        continue;
      }
      if (r != 1 || b[0] != ddprun::rendezvous::kStopWaiting || got[i]) ++wrong;
      got[i] = 1;
      ++received;
      epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], nullptr);
    }
  }
  const double fanin = Seconds(SteadyClock::now() - t0);
  ::close(ep);
  cleanup();
  int ok_count = 0;
  for (uint8_t g : got) ok_count += g;
  std::printf("setup_s %.6f\n", setup);
  std::printf("fanin_s %.6f\n", fanin);
  std::printf("stop_waiting %d of %d (wrong %d)\n", ok_count - wrong, n, wrong);
  const bool ok = received == n && wrong == 0 && ok_count == n;
  std::printf("fanin_ok %d\n", ok ? 1 : 0);
  return ok ? 0 : 1;
}

int Idle(const std::string& host, int port, int n) {
  RaiseFdLimit();
  // The bytes StoreClient::Connect sends (VALIDATE, PING), and its check of
  // the echo; opened concurrently (see OpenMany).
  const uint32_t nonce = static_cast<uint32_t>(getpid());
  Encoder hello, want;
  hello.Op(Op::kValidate).U32(ddprun::rendezvous::kValidateMagic).Op(Op::kPing).U32(nonce);
  want.U32(nonce);
  std::vector<int> fds;
  fds.reserve(n);
  if (!OpenMany(host, port, n, hello.bytes(), want.bytes(), &fds)) return 1;
  std::printf("ready %d\n", n);
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  for (int fd : fds) ::close(fd);
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: store_bench ops HOST PORT CLIENTS SECONDS\n"
               "       store_bench fanin HOST PORT N\n"
               "       store_bench idle HOST PORT N\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return Usage();
  const std::string mode = argv[1], host = argv[2];
  const int port = std::atoi(argv[3]);
  if (mode == "ops" && argc == 6) return Ops(host, port, std::atoi(argv[4]), std::atof(argv[5]));
  if (mode == "fanin" && argc == 5) return Fanin(host, port, std::atoi(argv[4]));
  if (mode == "idle" && argc == 5) return Idle(host, port, std::atoi(argv[4]));
  return Usage();
}
