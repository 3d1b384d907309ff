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

}  // namespace ddprun::launcher
