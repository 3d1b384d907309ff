// Known failure signatures, explained: what a failed worker's error file and
// last output lines say, turned into one "cause" and one "fix" line under the
// failure report's root cause. One table (explain.cpp); a signature matches on
// the text the worker printed, and its lines name what that text names (a
// module, a rank, a limit). No match, no explanation: never a guess.
//
// Pure functions; thread-compatible.
#pragma once

#include <optional>
#include <string>

#include "supervisor/failure_report.hpp"

namespace ddprun::supervisor {

// What the launcher knows that the worker's text does not.
struct ExplainContext {
  std::string interpreter;         // the workers' Python, "" when not under Python
  std::string interpreter_source;  // where it came from ("PATH", "PYTHON_EXEC", ...)
};

struct Explanation {
  std::string signature;  // the catalogue entry's name, e.g. "module not found"
  std::string cause;
  std::string fix;
};

std::optional<Explanation> Explain(const FailureRecord& failure, const ExplainContext& context);

}  // namespace ddprun::supervisor
