// train: the ddprun reference trainer. Under ddprun every rank trains the
// MLP with the DDP core on its own shard; with --reference one process
// computes the same training and prints the checksum DDP must reproduce.
//
// Exit codes: 0 ok, 1 a DDP or training error, 2 usage (or a device this
// trainer cannot use).
#include <cstdio>

#include "examples/train/distributed_run.hpp"
#include "examples/train/options.hpp"
#include "examples/train/reference_run.hpp"

int main(int argc, char** argv) {
  using ddprun::train::TrainOptions;
  ddprun::StatusOr<TrainOptions> options = ddprun::train::ParseOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "train: %s\n", options.status().message().c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(options->help_text.c_str(), stdout);
    return 0;
  }
  if (options->device == "cuda") {
    std::fprintf(stderr,
                 "train: --device cuda: not supported yet by this trainer (CPU only for now); "
                 "use --device cpu\n");
    return 2;
  }
  if (options->reference) return ddprun::train::RunReference(*options);
  return ddprun::train::RunDistributed(*options);
}
