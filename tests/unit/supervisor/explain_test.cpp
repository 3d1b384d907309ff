#include "supervisor/explain.hpp"

#include <doctest/doctest.h>

namespace ddprun::supervisor {
namespace {

FailureRecord Failed(const std::string& message, const std::string& tail = "") {
  FailureRecord f;
  f.message = message;
  f.output_tail = tail;
  return f;
}

TEST_CASE("explain: a module the workers' Python cannot import names it and the interpreter") {
  auto e = Explain(Failed("Traceback (most recent call last):\n  File \"t.py\", line 1\n"
                          "ModuleNotFoundError: No module named 'torch.distributed'"),
                   {"/usr/bin/python3", "PATH"});
  REQUIRE(e.has_value());
  CHECK(e->signature == "module not found");
  CHECK(e->cause ==
        "the workers' Python cannot import torch.distributed: they ran /usr/bin/python3 (from "
        "PATH)");
  CHECK(e->fix.find("install torch into that Python's environment") != std::string::npos);
  CHECK(e->fix.find("PYTHON_EXEC") != std::string::npos);
}

TEST_CASE("explain: the output tail counts when there is no error file") {
  auto e = Explain(Failed("exitcode 1", "ModuleNotFoundError: No module named \"numpy\"\n"), {});
  REQUIRE(e.has_value());
  CHECK(e->cause == "the workers' Python cannot import numpy");
}

TEST_CASE("explain: no match, no explanation") {
  CHECK_FALSE(Explain(Failed("RuntimeError: boom"), {}).has_value());
  CHECK_FALSE(Explain(Failed("ModuleNotFoundError: No module named"), {}).has_value());
  CHECK_FALSE(Explain(Failed("ModuleNotFoundError: No module named ''"), {}).has_value());
}

}  // namespace
}  // namespace ddprun::supervisor
