#include "examples/train/faults.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace ddprun::train {

void MaybeCrash(const TrainOptions& options, int rank, long step) {
  if (step != options.crash_at_step || rank != options.hang_rank) return;
  std::fprintf(stderr, "rank %d: crashing at step %ld as asked\n", rank, step);
  std::fflush(nullptr);
  std::exit(1);
}

void MaybeHang(const TrainOptions& options, int rank, long step) {
  if (step != options.hang_at_step || rank != options.hang_rank) return;
  std::fprintf(stderr, "rank %d: hanging before the backward of step %ld as asked\n", rank, step);
  std::fflush(nullptr);
  for (;;) pause();  // returns only after a handled signal; the hang goes on
}

bool Diverges(const TrainOptions& options, int rank, long step) {
  if (step != options.diverge_at_step || rank != options.hang_rank) return false;
  std::fprintf(stderr, "rank %d: an extra loss all-reduce at step %ld as asked\n", rank, step);
  std::fflush(nullptr);
  return true;
}

void MaybeHangAtExit(const TrainOptions& options, int rank) {
  if (!options.hang_at_exit || rank != options.hang_rank) return;
  std::fprintf(stderr, "rank %d: hanging at exit as asked\n", rank);
  std::fflush(nullptr);
  for (;;) pause();
}

bool InjectsNan(const TrainOptions& options, int rank, int world, long step) {
  return step == options.nan_at_step && rank == (world > 1 ? 1 : 0);
}

}  // namespace ddprun::train
