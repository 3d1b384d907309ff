// Signals whose sender matters, caught with the sender's pid.
//
// libuv's signal handles drop the siginfo. The tap catches its signals with a
// handler of its own (SA_SIGINFO | SA_RESTART, every signal blocked while it
// runs) that writes (signal, si_pid) to a non-blocking pipe; the loop reads
// the pipe and calls the handler for each delivery, in order. A delivery that
// finds the pipe full is dropped (hundreds queued: the loop is not running).
// Used for SIGUSR1/SIGUSR2 in a Slurm step, where the sender tells whether the
// workers already got the signal from Slurm (launcher/agent.cpp).
//
// One tap per process (the handler's pipe is process-wide); its signals must
// have no libuv handle. Close() before the loop's last run; afterwards (and
// after the destructor) the signals stay caught by late_signals' handler
// (CatchLate), never their default action. Loop thread only.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <functional>
#include <memory>
#include <set>

#include "base/status.hpp"
#include "base/unique_fd.hpp"

namespace ddprun::supervisor {

class SignalTap {
  struct Key {
    explicit Key() = default;
  };

 public:
  using Handler = std::function<void(int sig, pid_t sender)>;  // sender 0: the kernel

  explicit SignalTap(Key);  // use Start()
  // Catches `signals` from now on and hands them to `handler` on `loop`
  // (none: a tap that does nothing).
  static StatusOr<std::unique_ptr<SignalTap>> Start(uv_loop_t* loop, const std::set<int>& signals,
                                                    Handler handler);
  ~SignalTap();
  SignalTap(const SignalTap&) = delete;
  SignalTap& operator=(const SignalTap&) = delete;

  const std::set<int>& signals() const { return signals_; }
  // Stops reading; the loop must run once more for the close to finish.
  void Close();

 private:
  void ReadDeliveries();

  std::set<int> signals_;
  Handler handler_;
  UniqueFd read_, write_;
  uv_poll_t poll_{};
  bool polling_ = false;
};

}  // namespace ddprun::supervisor
