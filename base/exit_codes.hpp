// ddprun's exit codes, in one place: main, the agent, the supervisor and the
// rendezvous state machine take them from here, and man/ddprun.1 (EXIT STATUS)
// and --help list the same (tests/e2e/test_docs.py checks the man page).
#pragma once

#include "base/status.hpp"

namespace ddprun::exit_code {

inline constexpr int kSuccess = 0;
// Any other launcher failure (log directory, ports, rendezvous, resources).
inline constexpr int kFailure = 1;
// A usage error: an invalid option, value or environment variable.
inline constexpr int kUsage = 2;
// The workers succeeded, a log file could not be written completely (EX_IOERR).
inline constexpr int kLogLost = 74;
// The root cause was a hung worker (as timeout(1)).
inline constexpr int kHang = 124;
// The program or its interpreter is not executable, or the script not readable.
inline constexpr int kCannotExecute = 126;
// The program or its interpreter was not found.
inline constexpr int kNotFound = 127;

// Death by (or a stop on) signal `sig`, as the shell reports it.
constexpr int ForSignal(int sig) { return 128 + sig; }

// The exit code a launcher error of this kind stands for: 127 and 126 for a
// program that cannot be found or run, 2 for usage errors (invalid values,
// unsupported options), 1 for everything else.
inline int ForStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kSuccess;
    case StatusCode::kNotFound:
      return kNotFound;
    case StatusCode::kPermissionDenied:
      return kCannotExecute;
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnimplemented:
      return kUsage;
    default:
      return kFailure;
  }
}

}  // namespace ddprun::exit_code
