#include "env/openblas.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace ddprun::env {

VectorUnits ThisCpusVectorUnits() {
  VectorUnits v;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc checks XCR0 too: a unit the OS does not save is not reported.
  __builtin_cpu_init();
  v.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  v.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#endif
  return v;
}

std::string BetterOpenBlasCore(std::string_view chosen, VectorUnits cpu) {
  // OpenBLAS's x86 cores (driver/others/dynamic.c) whose kernels stop short of AVX2.
  static constexpr std::array<std::string_view, 20> kBeforeAvx2 = {
      "unknown",   "katmai", "coppermine",  "northwood", "prescott",  "banias",    "atom",
      "core2",     "penryn", "dunnington",  "nehalem",   "athlon",    "opteron",   "opteron_sse3",
      "barcelona", "nano",   "sandybridge", "bobcat",    "bulldozer", "piledriver"};
  std::string name(chosen);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!cpu.avx2_fma) return "";
  if (std::find(kBeforeAvx2.begin(), kBeforeAvx2.end(), name) == kBeforeAvx2.end()) return "";
  return cpu.avx512 ? "SkylakeX" : "Haswell";
}

std::string OpenBlasVersion(std::string_view config) {
  const size_t first = config.find(' ');
  return std::string(config.substr(0, first == config.npos ? first : config.find(' ', first + 1)));
}

}  // namespace ddprun::env
