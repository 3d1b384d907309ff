// ddprun's PyTorch progress hook (--hang_detect=torch): the text of
// python/ddprun_torch/sitecustomize.py, built into the binary, written into a
// directory of the run that goes first on the workers' PYTHONPATH
// (env/worker_env.hpp, GroupInfo::torch_hook_dir). See docs/flight-recorder.md.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"

namespace ddprun::launcher {

// Writes <dir>/sitecustomize.py and the module it imports beside it,
// _ddprun_torch_p2p.py (creating `dir`), and returns `dir`; fails with
// the path when it cannot be written.
StatusOr<std::string> WriteTorchHook(const std::string& dir);

// Where the hook goes for a run: <run_dir>/torch_hook, unless that path has
// a ':', at which the workers' Python splits PYTHONPATH (the hook was lost
// without a word, every hang unseen: attack 105). Then a directory of its
// own under `tmpdir` (TMPDIR; /tmp where that has a ':' too), said once and
// removed when this is destroyed. One per agent: each round writes it again.
class TorchHookDir {
 public:
  TorchHookDir() = default;
  TorchHookDir(const TorchHookDir&) = delete;
  TorchHookDir& operator=(const TorchHookDir&) = delete;
  ~TorchHookDir();

  StatusOr<std::string> Write(const std::string& run_dir, const std::string& tmpdir);

 private:
  std::string own_;  // the directory of its own, "" while none was made
};

// Whether a program's name is a Python interpreter's (python, python3, python3.12).
bool IsPythonName(const std::string& program);

// The first of Python's -E, -I and -S among `args`, the interpreter's own
// options before the script ("" when none): each keeps PYTHONPATH's
// sitecustomize, the hook, from loading.
std::string HookBlockingFlag(const std::vector<std::string>& args);

// A Python at or below a worker in which the hook cannot have loaded: its
// PYTHONPATH as it started leaves out the hook's directory (a wrapper that set
// PYTHONPATH instead of adding to it), or it runs with -E, -I or -S.
struct HooklessPython {
  pid_t pid = 0;
  std::string command;  // its command line, shortened
  std::string why;      // "its PYTHONPATH is \"/x\", without ddprun's hook directory"
};
// Looks at `root` and the processes below it (at most `limit`, through the
// children of each one's main thread); nullopt when none is found, or when
// another Python among them can load the hook (the trainer beside a helper).
std::optional<HooklessPython> FindHooklessPython(pid_t root, const std::string& hook_dir,
                                                 size_t limit = 64);

}  // namespace ddprun::launcher
