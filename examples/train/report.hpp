// What the trainer prints on stdout, in one place so that tests and the
// benchmark can parse it: "step S loss L" (rank 0, every kLossEvery steps
// and the last), "rank R checksum C" and "reference checksum C".
#pragma once

#include <string>

#include "base/status.hpp"
#include "examples/train/mlp.hpp"
#include "examples/train/options.hpp"

namespace ddprun::train {

inline constexpr long kLossEvery = 10;

bool IsLossStep(long step, long steps);
void PrintLoss(long step, float loss);
// The loss read at `step` (a loss step, the mean over the ranks: the same on
// every rank): an error once it is nan or infinite, which training never
// recovers from (the grad scaler skips non-finite gradients, not this).
Status CheckLoss(long step, float loss, const TrainOptions& options);
// `who` is "rank 3" or "reference".
void PrintChecksum(const char* who, const Mlp& model);
void PrintChecksum(const char* who, double checksum);
// `text` on stdout in one write(2) (after what stdio holds), so that the
// ranks' blocks, on one file or pipe shared by all, never interleave: stdio
// cuts a text longer than its buffer into several writes.
void PrintWhole(const std::string& text);

}  // namespace ddprun::train
