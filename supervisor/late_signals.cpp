#include "supervisor/late_signals.hpp"

#include <unistd.h>
#include <uv.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <memory>
#include <set>

#include "base/exit_codes.hpp"

namespace ddprun::supervisor {

namespace {

// After the supervisor's own handlers are gone (the launcher is exiting), a
// terminating signal still ends the launcher with 128+N, never by its default
// action (a core dump for SIGQUIT); the workers are gone by then.
// Said before the exit (with write(2): a signal handler), or the exit code
// would contradict everything printed before it.
void OnLateSignal(int sig) {
  if (sig == SIGUSR1 || sig == SIGUSR2) return;  // nobody left to pass them on to
  const char* said = nullptr;
  switch (sig) {
    case SIGHUP:
      said = "ddprun: received SIGHUP while exiting: exit code 129\n";
      break;
    case SIGINT:
      said = "ddprun: received SIGINT while exiting: exit code 130\n";
      break;
    case SIGQUIT:
      said = "ddprun: received SIGQUIT while exiting: exit code 131\n";
      break;
    case SIGTERM:
      said = "ddprun: received SIGTERM while exiting: exit code 143\n";
      break;
    default:
      said = "ddprun: received a terminating signal while exiting: exit code 128 + its number\n";
  }
  ssize_t ignored = write(STDERR_FILENO, said, strlen(said));
  (void)ignored;
  _exit(exit_code::ForSignal(sig));
}

std::atomic<unsigned> g_deliveries{0};
struct sigaction g_chained[NSIG];  // the handler each counted signal had before

void CountThenChain(int sig, siginfo_t* info, void* context) {
  g_deliveries.fetch_add(1, std::memory_order_relaxed);
  const struct sigaction& next = g_chained[sig];
  if ((next.sa_flags & SA_SIGINFO) != 0) {
    if (next.sa_sigaction != nullptr) next.sa_sigaction(sig, info, context);
  } else if (next.sa_handler != SIG_DFL && next.sa_handler != SIG_IGN &&
             next.sa_handler != nullptr) {
    next.sa_handler(sig);
  }
}

}  // namespace

void CountDeliveries(int sig) {
  struct sigaction now {};
  if (sig <= 0 || sig >= NSIG || sigaction(sig, nullptr, &now) != 0) return;
  if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == CountThenChain) return;
  g_chained[sig] = now;
  struct sigaction sa = now;
  sa.sa_sigaction = CountThenChain;
  sa.sa_flags = now.sa_flags | SA_SIGINFO;
  sigaction(sig, &sa, nullptr);
}

unsigned CountedDeliveries() { return g_deliveries.load(std::memory_order_relaxed); }

std::set<int> IgnoredSignals() {
  std::set<int> ignored;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa {};
    if (sigaction(sig, nullptr, &sa) == 0 && (sa.sa_flags & SA_SIGINFO) == 0 &&
        sa.sa_handler == SIG_IGN) {
      ignored.insert(sig);
    }
  }
  return ignored;
}

// libuv restores a signal's default disposition when the last of its handles
// for that signal closes. Handles on a loop that never runs, never closed,
// keep that from happening between the supervisor's handles closing and
// OnLateSignal taking over (their loop's signal pipe just fills up).
// Returns 0 or a libuv error (out of fds: the keeper's loop or signal pipe).
int KeepCaught(int sig) {
  static uv_loop_t* keeper = nullptr;
  static std::set<int> kept;
  if (kept.count(sig) != 0) return 0;
  if (keeper == nullptr) {
    auto loop = std::make_unique<uv_loop_t>();
    if (int rc = uv_loop_init(loop.get()); rc != 0) return rc;
    keeper = loop.release();  // never closed
  }
  auto h = std::make_unique<uv_signal_t>();
  if (int rc = uv_signal_init(keeper, h.get()); rc != 0) return rc;
  uv_signal_start(
      h.release(), [](uv_signal_t*, int) {}, sig);  // never closed
  kept.insert(sig);
  return 0;
}

void CatchLate(int sig, bool ignore) {
  struct sigaction sa {};
  sa.sa_handler = ignore ? SIG_IGN : OnLateSignal;
  sigfillset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

}  // namespace ddprun::supervisor
