#include "examples/train/report.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string>

namespace ddprun::train {

bool IsLossStep(long step, long steps) { return step % kLossEvery == 0 || step == steps - 1; }

void PrintLoss(long step, float loss) {
  std::printf("step %ld loss %.6g\n", step, loss);
  std::fflush(stdout);
}

Status CheckLoss(long step, float loss, const TrainOptions& o) {
  if (std::isfinite(loss)) return Status::Ok();
  const char* what = std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf";
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%g", o.lr);
  // Clipping bounds an SGD step; Adam's step is about --lr whatever the gradient (attack 100).
  const bool clip_helps = o.optimizer == OptimizerKind::kSgd && !o.clip;
  return Status(StatusCode::kAborted, "step " + std::to_string(step) + ": the loss became " + what +
                                          " (the mean over the ranks, read every " +
                                          std::to_string(kLossEvery) +
                                          " steps): training diverged; lower --lr (" + rate + ")" +
                                          (clip_helps ? " or bound the updates with --clip" : ""));
}

void PrintChecksum(const char* who, const Mlp& model) { PrintChecksum(who, model.Checksum()); }

void PrintChecksum(const char* who, double checksum) {
  std::printf("%s checksum %.9g\n", who, checksum);
  std::fflush(stdout);
}

void PrintWhole(const std::string& text) {
  std::fflush(stdout);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed stdout: nothing to say it on
    done += static_cast<size_t>(n);
  }
}

}  // namespace ddprun::train
