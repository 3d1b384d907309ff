// The failures the trainer reproduces on demand, each at a chosen step:
// a rank that dies (--crash-at-step), a rank that stops participating before
// backward (--hang-at-step), one that hangs in its exit (--hang-at-exit), and
// a NaN in one gradient (--nan-at-step).
#pragma once

#include "examples/train/options.hpp"

namespace ddprun::train {

// Whether `rank` makes an extra loss all-reduce at the start of `step`
// (--diverge-at-step; says so once): the others are in another collective.
bool Diverges(const TrainOptions& options, int rank, long step);

// The parameter the NaN goes into.
inline constexpr const char* kNanParameter = "layers.1.weight";

// Exits 1 (after saying so) when `rank` is asked to crash at `step`.
void MaybeCrash(const TrainOptions& options, int rank, long step);
// Blocks forever (after saying so) when `rank` is asked to hang at `step`.
void MaybeHang(const TrainOptions& options, int rank, long step);
// Blocks forever (after saying so) when `rank` is asked to hang at its exit.
void MaybeHangAtExit(const TrainOptions& options, int rank);
// Whether `rank` of `world` puts the NaN into its gradient at `step`: rank 1,
// or rank 0 when it is alone.
bool InjectsNan(const TrainOptions& options, int rank, int world, long step);

}  // namespace ddprun::train
