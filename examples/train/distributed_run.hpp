// The DDP run: one rank of a job started by ddprun. Reads the launcher's
// environment, builds the process group and the Reducer over the MLP, and
// trains on this rank's shard; rank 0 prints the loss averaged over ranks,
// every rank prints "rank R checksum C". An error from the DDP core is
// printed as "train: rank R: <message>" (exit 1).
//
// --device cpu: Gloo, the model in host memory (Mlp). --device cuda (in the
// CUDA plugin, cuda_plugin.hpp, where this file is built with the GPU path;
// main runs it there): device LOCAL_RANK
// (exit 2 when there is no such device), NCCL, the model in device memory
// (CudaMlp) with device optimizers; the checksum is the same as the CPU
// run's to float rounding.
#pragma once

#include "examples/train/options.hpp"

namespace ddprun::train {

// Returns the process exit code.
int RunDistributed(const TrainOptions& options);

}  // namespace ddprun::train
