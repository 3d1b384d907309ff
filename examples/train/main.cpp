// train: the ddprun reference trainer. Under ddprun every rank trains the
// MLP with the DDP core on its own shard; with --reference one process
// computes the same training and prints the checksum DDP must reproduce.
//
// Exit codes: 0 ok, 1 a DDP or training error, 2 usage (or a device this
// trainer, build or host cannot use: --device cuda without a CUDA build or
// without the CUDA plugin and libraries, LOCAL_RANK without a device). --reference always runs on
// the host.
//
// This executable has only the CPU path; --device cuda runs in the CUDA
// plugin (cuda_plugin.hpp), loaded only then.
#include <cstdio>
#include <new>
#include <string>

#include "ddp/error_file.hpp"

#include "examples/train/cuda_plugin.hpp"
#include "examples/train/distributed_run.hpp"
#include "examples/train/openblas_kernels.hpp"
#include "examples/train/options.hpp"
#include "examples/train/reference_run.hpp"

namespace {

// Why this build cannot train `options` on CUDA, or nullptr when it can.
const char* CudaUnsupported(const ddprun::train::TrainOptions& options) {
#ifndef DDPRUN_TRAIN_CUDA_PLUGIN
  (void)options;
  return "this build has no CUDA path (cmake found no CUDA toolkit and NCCL): rebuild where "
         "they are installed, or use --device cpu";
#else
  (void)options;
  return nullptr;
#endif
}

// --device cuda: the run in the CUDA plugin, or exit 2 when it cannot load.
int RunOnCuda(const ddprun::train::TrainOptions& options) {
#ifdef DDPRUN_TRAIN_CUDA_PLUGIN
  ddprun::StatusOr<int> code = ddprun::train::RunInCudaPlugin(DDPRUN_TRAIN_CUDA_PLUGIN, options);
  if (code.ok()) return *code;
  std::fprintf(stderr, "train: --device cuda: %s\n", code.status().message().c_str());
#else
  (void)options;
#endif
  return 2;
}

}  // namespace

namespace {

int Run(const ddprun::train::TrainOptions& options, char** argv) {
  // The host's GEMMs: the CPU path's and the reference's (before either starts).
  if (options.reference || options.device != "cuda") {
    ddprun::train::UseTheCpusOpenBlasKernels(argv);
  }
  if (options.reference) return ddprun::train::RunReference(options);  // always on the host
  if (options.device == "cuda") {
    const char* why = CudaUnsupported(options);
    if (why != nullptr) {
      std::fprintf(stderr, "train: --device cuda: %s\n", why);
      return 2;
    }
    return RunOnCuda(options);
  }
  return ddprun::train::RunDistributed(options);
}

}  // namespace

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
  try {
    return Run(*options, argv);
  } catch (const std::bad_alloc&) {
    // The model's and the batch's buffers on the host: --width and --batch
    // decide their size.
    // In the error file too, as every other failure of a rank (attack 98).
    const std::string text = "train: out of host memory for the model and the batch (--width " +
                             std::to_string(options->width) + ", --depth " +
                             std::to_string(options->depth) + ", --batch " +
                             std::to_string(options->batch) +
                             "): use smaller values, or check ulimit -v and the memory cgroup";
    std::fprintf(stderr, "%s\n", text.c_str());
    (void)ddprun::ddp::RecordError(text);
    return 1;
  }
}
