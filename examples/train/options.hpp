// The reference trainer's command line: one option table, parsed into one
// TrainOptions value that is passed down (no global state).
//
// ParseOptions never exits or prints: a bad command line is an
// InvalidArgument status whose message says what to fix (exit 2 in main).
#pragma once

#include <string>

#include "base/status.hpp"

namespace ddprun::train {

enum class Precision { kFloat32, kFloat16, kBFloat16 };
enum class OptimizerKind { kSgd, kAdam };

struct TrainOptions {
  bool help = false;
  std::string help_text;  // filled when `help`

  std::string device = "cpu";
  long steps = 50;
  int batch = 32;
  int width = 256;
  int depth = 3;
  unsigned long seed = 1;
  float lr = 0.01f;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  Precision amp = Precision::kFloat32;
  bool clip = false;

  bool unused_layer = false;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  double bucket_cap_mb = 0;         // 0: the reducer's default
  bool grad_copies = false;         // not ReducerOptions::gradient_as_bucket_view
  double collective_timeout_s = 0;  // 0: the group's default

  long crash_at_step = -1;  // -1: never
  long hang_at_step = -1;
  long diverge_at_step = -1;  // -1: never
  bool hang_at_exit = false;  // --hang-rank hangs after ddp::Finishing()
  int hang_rank = 1;          // the rank that crashes or hangs
  long nan_at_step = -1;

  bool reference = false;
  int world_size = 1;  // with --reference

  // Benchmarking (bench/ddp_bench.py): --time prints every rank's per-step
  // wall times and peak RSS; --no-comm runs the same compute with no
  // communication; --comm-only runs the step's communication with no compute.
  bool time = false;
  bool no_comm = false;
  bool comm_only = false;

  // Whether the step goes through the GradScaler (AMP, NaN injection, clipping).
  bool UseScaler() const { return amp != Precision::kFloat32 || nan_at_step >= 0 || clip; }

  // A fault of rank --hang-rank was asked for (crash, hang, divergence).
  bool RankFault() const {
    return crash_at_step >= 0 || hang_at_step >= 0 || hang_at_exit || diverge_at_step >= 0;
  }
};

StatusOr<TrainOptions> ParseOptions(int argc, const char* const* argv);

}  // namespace ddprun::train
