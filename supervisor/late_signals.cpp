#include "supervisor/late_signals.hpp"

#include <unistd.h>
#include <uv.h>

#include <csignal>
#include <memory>
#include <set>

#include "base/exit_codes.hpp"

namespace ddprun::supervisor {

namespace {

// After the supervisor's own handlers are gone (the launcher is exiting), a
// terminating signal still ends the launcher with 128+N, never by its default
// action (a core dump for SIGQUIT); the workers are gone by then.
void OnLateSignal(int sig) {
  if (sig == SIGUSR1 || sig == SIGUSR2) return;  // nobody left to pass them on to
  _exit(exit_code::ForSignal(sig));
}

}  // namespace

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
