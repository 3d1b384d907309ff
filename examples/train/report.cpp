#include "examples/train/report.hpp"

#include <unistd.h>

#include <cerrno>
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
