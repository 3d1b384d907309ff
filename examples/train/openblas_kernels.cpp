#include "examples/train/openblas_kernels.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "env/openblas.hpp"

// OpenBLAS's own entry points; weak, so that another BLAS links (and is left alone).
extern "C" char* openblas_get_corename() __attribute__((weak));
extern "C" char* openblas_get_config() __attribute__((weak));

namespace ddprun::train {
namespace {

// The core OpenBLAS chose, handed to the run again (and the mark that it is one).
constexpr char kChose[] = "DDPRUN_TRAIN_OPENBLAS_CHOSE";

bool Speaks() {
  const char* rank = std::getenv("RANK");
  return rank == nullptr || std::strcmp(rank, "0") == 0;
}

std::string Version() {
  return env::OpenBlasVersion(openblas_get_config != nullptr ? openblas_get_config() : "OpenBLAS");
}

}  // namespace

void UseTheCpusOpenBlasKernels(char** argv) {
  if (openblas_get_corename == nullptr) return;
  if (const char* chose = std::getenv(kChose)) {
    const std::string was = chose;
    unsetenv(kChose);
    if (Speaks()) {
      std::fprintf(stderr,
                   "train: %s took this CPU for a %s (kernels without AVX2): running with "
                   "OPENBLAS_CORETYPE=%s, which it runs as %s; set OPENBLAS_CORETYPE to choose\n",
                   Version().c_str(), was.c_str(), std::getenv("OPENBLAS_CORETYPE"),
                   openblas_get_corename());
    }
    return;
  }
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice
  const std::string chosen = openblas_get_corename();
  const std::string better = env::BetterOpenBlasCore(chosen, env::ThisCpusVectorUnits());
  if (better.empty()) return;
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv(kChose, chosen.c_str(), 1);
  execv("/proc/self/exe", argv);
  const int err = errno;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kChose);
  if (Speaks()) {
    std::fprintf(stderr,
                 "train: %s took this CPU for a %s (kernels without AVX2); running again with "
                 "OPENBLAS_CORETYPE=%s failed (%s): set it yourself for about 2x faster GEMMs\n",
                 Version().c_str(), chosen.c_str(), better.c_str(), std::strerror(err));
  }
}

}  // namespace ddprun::train
