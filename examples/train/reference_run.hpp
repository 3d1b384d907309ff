// --reference: one process, no process group and no reducer, computes the
// training that DDP does on --world-size ranks: each step runs every rank's
// shard through forward and backward separately (the same math as that
// rank), averages the gradients over the shards and updates once. Prints the
// loss (the mean over shards) and "reference checksum C".
#pragma once

#include "examples/train/options.hpp"

namespace ddprun::train {

// Returns the process exit code.
int RunReference(const TrainOptions& options);

}  // namespace ddprun::train
