// ddprun's PyTorch progress hook (--hang_detect=torch): the text of
// python/ddprun_torch/sitecustomize.py, built into the binary, written into a
// directory of the run that goes first on the workers' PYTHONPATH
// (env/worker_env.hpp, GroupInfo::torch_hook_dir). See docs/flight-recorder.md.
#pragma once

#include <string>

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

}  // namespace ddprun::launcher
