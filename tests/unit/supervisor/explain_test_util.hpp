// What the explain tests share: a context and a failure record.
#pragma once

#include <string>
#include <utility>

#include "supervisor/explain.hpp"

namespace ddprun::supervisor::explain_test {

inline ExplainContext Context(std::string interpreter, std::string source) {
  ExplainContext c;
  c.interpreter = std::move(interpreter);
  c.interpreter_source = std::move(source);
  return c;
}

inline FailureRecord Failed(const std::string& message, const std::string& tail = "") {
  FailureRecord f;
  f.message = message;
  f.output_tail = tail;
  return f;
}

}  // namespace ddprun::supervisor::explain_test
