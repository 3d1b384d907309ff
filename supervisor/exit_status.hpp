// How a worker ended: an exit code or a signal, decoded from waitpid().
#pragma once

#include <signal.h>

#include <string>

#include "base/exit_codes.hpp"

namespace ddprun::supervisor {

struct ExitStatus {
  int code = 0;              // exit code when signal == 0
  int signal = 0;            // terminating signal, or 0
  bool core_dumped = false;  // the kernel wrote a core dump (core(5))

  static ExitStatus FromWaitStatus(int wstatus);
  // From waitid()'s siginfo (CLD_EXITED, CLD_KILLED or CLD_DUMPED).
  static ExitStatus FromSiginfo(const siginfo_t& info);
  static ExitStatus Exited(int code) { return {code, 0}; }
  static ExitStatus Signaled(int sig) { return {0, sig}; }

  bool success() const { return signal == 0 && code == 0; }
  // The shell's convention: the code, or 128+N for death by signal N.
  int ShellCode() const { return signal != 0 ? exit_code::ForSignal(signal) : code; }
  // torchrun's convention: the code, or -N for death by signal N.
  int TorchCode() const { return signal != 0 ? -signal : code; }
  // "exit code 3" or "signal 9 (SIGKILL)".
  std::string Describe() const;
  // Died of a signal that a program's own fault raises (SIGSEGV, SIGBUS,
  // SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP): a crash, not a stop.
  bool Crashed() const;
};

// "SIGTERM" for 15; "SIG<n>" for numbers without a name.
std::string SignalName(int sig);
// 15 for "SIGTERM" or "TERM" (any case); 0 if unknown.
int SignalNumber(const std::string& name);

}  // namespace ddprun::supervisor
