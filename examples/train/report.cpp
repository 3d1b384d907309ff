#include "examples/train/report.hpp"

#include <cstdio>

namespace ddprun::train {

bool IsLossStep(long step, long steps) { return step % kLossEvery == 0 || step == steps - 1; }

void PrintLoss(long step, float loss) {
  std::printf("step %ld loss %.6g\n", step, loss);
  std::fflush(stdout);
}

void PrintChecksum(const char* who, const Mlp& model) { PrintChecksum(who, model.Checksum()); }

void PrintChecksum(const char* who, double checksum) {
  std::printf("%s checksum %.9g\n", who, checksum);
  std::fflush(stdout);
}

}  // namespace ddprun::train
