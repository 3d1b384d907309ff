// The DDP run: one rank of a job started by ddprun. Reads the launcher's
// environment, builds the Gloo process group and the Reducer over the MLP,
// and trains on this rank's shard; rank 0 prints the loss averaged over
// ranks, every rank prints "rank R checksum C". An error from the DDP core
// is printed as "train: rank R: <message>" (exit 1).
#pragma once

#include "examples/train/options.hpp"

namespace ddprun::train {

// Returns the process exit code.
int RunDistributed(const TrainOptions& options);

}  // namespace ddprun::train
