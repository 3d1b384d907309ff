// The entry point of the CUDA plugin (cuda_plugin.hpp): in the plugin,
// distributed_run.cpp is built with the DDP core's GPU path.
#include "examples/train/cuda_plugin.hpp"
#include "examples/train/distributed_run.hpp"

int ddprun_train_cuda_run_v1(const ddprun::train::TrainOptions* options) {
  return ddprun::train::RunDistributed(*options);
}
