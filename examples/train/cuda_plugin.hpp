// The trainer's CUDA plugin: libddprun_train_cuda.so, beside the train
// executable (build/examples in the build, libexec/ddprun installed). It holds
// all of --device cuda: the model and optimizers on cuBLAS and small kernels,
// and the rank's loop over the DDP core's GPU path (NCCL). It links cudart,
// cuBLAS and NCCL and train does not, so train starts on a host without them
// and a CPU rank never maps them; train loads the plugin only for
// --device cuda.
//
// The plugin exports one C entry point that takes the parsed TrainOptions:
// plugin and executable must come from the same build (they are built and
// installed together). Only in a build that found CUDA.
#pragma once

#include "base/status.hpp"
#include "examples/train/options.hpp"

// The plugin's entry point: RunDistributed(*options) for --device cuda, in the
// plugin's own copy of the loop and the DDP core. Returns the exit code.
extern "C" __attribute__((visibility("default"))) int ddprun_train_cuda_run_v1(
    const ddprun::train::TrainOptions* options);

namespace ddprun::train {

// Loads the plugin `file_name` from the directory of the running executable
// and returns the exit code of its run of `options`. Unavailable, naming the
// plugin, the loader's cause (a missing plugin or CUDA library) and what to do,
// when it cannot be loaded. The plugin stays loaded until the process ends.
StatusOr<int> RunInCudaPlugin(const char* file_name, const TrainOptions& options);

}  // namespace ddprun::train
