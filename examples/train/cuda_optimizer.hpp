// The optimizers of optimizer.hpp on device memory: the same SGD and Adam
// formulas as element-wise kernels over each ddp::Parameter's device data
// and gradient, on the legacy default stream. Adam's moments are allocated
// on the current device at construction. A failed launch is kept and
// returned by TakeError(). Compiled only in a DDPRUN_HAVE_CUDA build.
#pragma once

#include <memory>
#include <vector>

#include "base/status.hpp"
#include "examples/train/cuda_mlp.hpp"
#include "examples/train/optimizer.hpp"

namespace ddprun::train {

// `half`: the 16-bit copies of the weights that --amp's forward multiplies
// (CudaMlp::HandOverHalfWeights), written by each step in the pass that
// updates the fp32 weights.
StatusOr<std::unique_ptr<Optimizer>> MakeCudaOptimizer(OptimizerKind kind, float lr,
                                                       const std::vector<ddp::Parameter>& params,
                                                       HalfWeights half = {});

}  // namespace ddprun::train
