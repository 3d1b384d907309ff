#include "examples/train/openblas_kernels.hpp"

#include <cblas.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "env/openblas.hpp"

// OpenBLAS's own entry points; weak, so that another BLAS links (and is left alone).
extern "C" char* openblas_get_corename() __attribute__((weak));
extern "C" char* openblas_get_config() __attribute__((weak));
extern "C" int openblas_get_num_threads() __attribute__((weak));
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));

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
  // By its own path, not /proc/self/exe: the process keeps its name (comm
  // "train", not "exe") for ps, pgrep and the tests that look for it.
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    if (access(self, X_OK) == 0) execv(self, argv);  // (not when replaced: " (deleted)")
  }
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

namespace {

// Whether `bytes` more of address space can be mapped now.
bool CanMap(size_t bytes) {
  void* probe = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) return false;
  munmap(probe, bytes);
  return true;
}

// One GEMM large enough to run on OpenBLAS's threads: each maps its work
// buffer now, while there is room, and keeps it for the GEMMs to come. What
// the model, the buckets and the process group's threads map later then
// fails as an allocation, which is said, instead of a GEMM's mapping, which
// OpenBLAS retries forever.
void MapOpenBlasBuffersNow() {
  constexpr int kN = 128;
  static float a[kN * kN], b[kN * kN], c[kN * kN];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, a, kN, b, kN, 0.0f, c,
              kN);
}

}  // namespace

int GemmThreads() {
  return openblas_get_num_threads == nullptr ? 1 : std::max(openblas_get_num_threads(), 1);
}

bool OpenBlasHasRoom(const char* who) {
  if (openblas_get_corename == nullptr || openblas_get_num_threads == nullptr) return true;
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return true;
  // OpenBLAS's BUFFER_SIZE on x86-64 (32 << 22) and its alignment, one per
  // thread of a threaded GEMM; and a malloc arena (64 MiB of address space)
  // for a thread that allocates for the first time.
  constexpr size_t kBuffer = (size_t{128} << 20) + (size_t{64} << 10);
  constexpr size_t kArena = size_t{64} << 20;
  const int threads = std::max(openblas_get_num_threads(), 1);
  const double limit_mib = static_cast<double>(as.rlim_cur) / (1 << 20);
  if (CanMap(static_cast<size_t>(threads) * kBuffer + kArena)) {
    MapOpenBlasBuffersNow();
    return true;
  }
  if (CanMap(kBuffer + kArena) && openblas_set_num_threads != nullptr) {
    openblas_set_num_threads(1);
    MapOpenBlasBuffersNow();
    if (Speaks()) {
      std::fprintf(stderr,
                   "train: %s: ulimit -v (RLIMIT_AS, %.0f MiB) leaves room for one of OpenBLAS's "
                   "128 MiB work buffers, not for each of its %d threads' (a threaded GEMM would "
                   "retry the mapping forever): GEMMs run on one thread; raise ulimit -v by "
                   "%d MiB or lift it for all %d\n",
                   who, limit_mib, threads, 128 * (threads - 1), threads);
    }
    return true;
  }
  std::fprintf(stderr,
               "train: %s: ulimit -v (RLIMIT_AS, %.0f MiB) leaves no room for OpenBLAS's 128 MiB "
               "work buffer (and a 64 MiB malloc arena), which it maps at the first GEMM and "
               "retries forever when it cannot (the rank would spin without a word): raise "
               "ulimit -v by 192 MiB or more, or lift it (ulimit -v unlimited); see ddprun(1), "
               "LIMITS\n",
               who, limit_mib);
  return false;
}

}  // namespace ddprun::train
