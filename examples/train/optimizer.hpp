// The trainer's optimizers over ddp::Parameter (fp32 data and gradients):
// SGD (p -= lr * g) and Adam with PyTorch's defaults (betas 0.9/0.999,
// eps 1e-8, bias correction, no weight decay).
//
// An optimizer keeps per-parameter state sized at construction, so it must
// step the same parameter list every time. Not thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "base/status.hpp"
#include "ddp/reducer.hpp"
#include "examples/train/options.hpp"

namespace ddprun::train {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void Step(std::vector<ddp::Parameter>& params) = 0;
  // The first failure of a Step since the last call (device optimizers), or Ok.
  virtual Status TakeError() { return Status::Ok(); }
};

std::unique_ptr<Optimizer> MakeOptimizer(OptimizerKind kind, float lr,
                                         const std::vector<ddp::Parameter>& params);

}  // namespace ddprun::train
