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
  // Under Python: the interpreter, and where it was found ("PYTHON_EXEC",
  // "ddprun's own environment", "VIRTUAL_ENV", "CONDA_PREFIX", "PATH"); "" otherwise.
  std::string interpreter;
  std::string interpreter_source;
};

// A .py program (or -m, --run_path) runs under, first found: PYTHON_EXEC (as
// torchrun); the python of the environment ddprun is installed in (`self_exe`'s
// directory, when its parent holds pyvenv.cfg or conda-meta: /venv/bin/ddprun
// runs /venv/bin/python, as /venv/bin/torchrun would); the activated
// VIRTUAL_ENV, then CONDA_PREFIX; python3 on PATH.
// kNotFound (exit 127) when the program or the interpreter does not exist,
// kPermissionDenied (exit 126) when it cannot be executed or read.
StatusOr<Program> ResolveProgram(const LaunchConfig& config, const env::Environ& environ,
                                 const std::string& self_exe = "/proc/self/exe");

// Fails (kUnavailable) when the working directory was removed (a checkout
// cleaned or cloned again under the shell): workers would start in it, where
// relative paths and Python's os.getcwd() fail. The message names $PWD and,
// when a directory of that name exists again, how to enter it.
Status CheckWorkingDirectory(const env::Environ& environ);

// The words of `path`'s #! line (the interpreter, then its arguments); empty
// when it is no script or unreadable. Split at blanks only: a CRLF line's
// interpreter keeps its '\r'.
std::vector<std::string> Shebang(const std::string& path);

// Looks `name` up on `path_var` (PATH) unless it contains a '/'.
StatusOr<std::string> FindExecutable(const std::string& name, const std::string& path_var);

}  // namespace ddprun::launcher
