#include "env/openblas.hpp"

#include <doctest/doctest.h>

namespace ddprun::env {
namespace {

constexpr VectorUnits kNone{};
constexpr VectorUnits kAvx2{true, false};
constexpr VectorUnits kAvx512{true, true};

TEST_CASE("a CPU taken for a core without AVX2 kernels gets the kernels it runs") {
  CHECK(BetterOpenBlasCore("Prescott", kAvx512) == "SkylakeX");  // OpenBLAS 0.3.21, model 207
  CHECK(BetterOpenBlasCore("Prescott", kAvx2) == "Haswell");
  CHECK(BetterOpenBlasCore("Sandybridge", kAvx2) == "Haswell");
  CHECK(BetterOpenBlasCore("NEHALEM", kAvx512) == "SkylakeX");  // any case
  CHECK(BetterOpenBlasCore("Unknown", kAvx2) == "Haswell");
}

TEST_CASE("a core OpenBLAS knows, or a CPU without AVX2, keeps OpenBLAS's choice") {
  CHECK(BetterOpenBlasCore("SkylakeX", kAvx512).empty());
  CHECK(BetterOpenBlasCore("Haswell", kAvx512).empty());  // Zen 4 is "Zen" or "Haswell": known
  CHECK(BetterOpenBlasCore("Zen", kAvx512).empty());
  CHECK(BetterOpenBlasCore("SapphireRapids", kAvx512).empty());
  CHECK(BetterOpenBlasCore("Prescott", kNone).empty());  // it is one
  CHECK(BetterOpenBlasCore("", kAvx2).empty());
}

TEST_CASE("the version is the first two words of OpenBLAS's configuration") {
  CHECK(OpenBlasVersion("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64") ==
        "OpenBLAS 0.3.21");
  CHECK(OpenBlasVersion("OpenBLAS 0.3.26") == "OpenBLAS 0.3.26");
  CHECK(OpenBlasVersion("OpenBLAS") == "OpenBLAS");
}

}  // namespace
}  // namespace ddprun::env
