#include "supervisor/signal_tap.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <string>

#include "supervisor/late_signals.hpp"

namespace ddprun::supervisor {

namespace {

struct Delivery {
  int32_t sig;
  int32_t sender;
};

// The pipe the handler writes to, and the process that installed it: a
// forked child (before its exec) must not write into its parent's pipe.
std::atomic<int> g_write_fd{-1};
std::atomic<pid_t> g_owner{0};

void OnTappedSignal(int sig, siginfo_t* info, void*) {
  const int fd = g_write_fd.load();
  if (fd < 0 || getpid() != g_owner.load()) return;
  const int saved = errno;
  const Delivery d{sig, info != nullptr ? static_cast<int32_t>(info->si_pid) : 0};
  ssize_t n;
  do {
    n = write(fd, &d, sizeof(d));  // atomic: sizeof(d) < PIPE_BUF
  } while (n < 0 && errno == EINTR);
  errno = saved;
}

}  // namespace

SignalTap::SignalTap(Key) {}

StatusOr<std::unique_ptr<SignalTap>> SignalTap::Start(uv_loop_t* loop, const std::set<int>& signals,
                                                      Handler handler) {
  auto tap = std::make_unique<SignalTap>(Key{});
  if (signals.empty()) return tap;  // nothing to catch: holds nothing process-wide
  if (g_write_fd.load() >= 0) return Internal("signal tap: one is already started");
  tap->signals_ = signals;
  tap->handler_ = std::move(handler);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("signal tap: pipe2", errno);
  tap->read_ = UniqueFd(fds[0]);
  tap->write_ = UniqueFd(fds[1]);
  for (int sig : signals) {
    struct sigaction sa {};
    sa.sa_sigaction = OnTappedSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(sig, &sa, nullptr) != 0) {
      return ErrnoStatus("signal tap: sigaction " + std::to_string(sig), errno);
    }
  }
  // Last, so that a failure leaves no handle on the loop.
  if (int rc = uv_poll_init(loop, &tap->poll_, tap->read_.get()); rc != 0) {
    return Internal(std::string("signal tap: uv_poll_init: ") + uv_strerror(rc));
  }
  tap->poll_.data = tap.get();
  tap->polling_ = true;
  uv_poll_start(&tap->poll_, UV_READABLE,
                [](uv_poll_t* p, int, int) { static_cast<SignalTap*>(p->data)->ReadDeliveries(); });
  g_owner = getpid();
  g_write_fd = tap->write_.get();
  return tap;
}

void SignalTap::ReadDeliveries() {
  Delivery d{};
  while (read(read_.get(), &d, sizeof(d)) == static_cast<ssize_t>(sizeof(d))) {
    handler_(d.sig, static_cast<pid_t>(d.sender));
  }
}

void SignalTap::Close() {
  if (!polling_) return;
  polling_ = false;
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
}

// The signals go to the late handler before the pipe closes.
SignalTap::~SignalTap() {
  for (int sig : signals_) CatchLate(sig, false);
  if (write_.valid() && g_write_fd.load() == write_.get()) g_write_fd = -1;
}

}  // namespace ddprun::supervisor
