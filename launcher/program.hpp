// What each worker executes: the program resolved to an executable path and
// the argv prefix torchrun would use (python3 -u script.py, python3 -u -m
// module, or the program itself), checked before any worker starts.
#pragma once

#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/environ.hpp"
#include "launcher/launch_config.hpp"

namespace ddprun::launcher {

struct Program {
  std::vector<std::string> argv;  // argv[0] is an absolute or relative path that exists
  std::string name;               // the title of the failure report
};

// kNotFound (exit 127) when the program or the interpreter does not exist,
// kPermissionDenied (exit 126) when it cannot be executed or read.
StatusOr<Program> ResolveProgram(const LaunchConfig& config, const env::Environ& environ);

// Looks `name` up on `path_var` (PATH) unless it contains a '/'.
StatusOr<std::string> FindExecutable(const std::string& name, const std::string& path_var);

}  // namespace ddprun::launcher
