// OpenBLAS picks its kernels by the CPU's model, and a model it does not know
// gets its oldest x86-64 kernels: OpenBLAS 0.3.21 (Debian 12's) takes an
// Emerald Rapids Xeon (family 6, model 207, AVX-512) for a Prescott and
// multiplies with SSE3, at 0.37x the speed of its SkylakeX kernels on the
// same host (examples/train, width 1024). The choice is made when the
// library loads; OPENBLAS_CORETYPE overrides it.
#pragma once

#include <string>
#include <string_view>

namespace ddprun::env {

// The vector units this CPU has and the OS enables.
struct VectorUnits {
  bool avx2_fma = false;
  bool avx512 = false;  // F, CD, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use
};
VectorUnits ThisCpusVectorUnits();

// The OPENBLAS_CORETYPE whose kernels `cpu` runs when OpenBLAS chose `chosen`
// (openblas_get_corename()), a core without AVX2 kernels, or "" when its
// choice stands (a core it knows, or a CPU without AVX2).
std::string BetterOpenBlasCore(std::string_view chosen, VectorUnits cpu);

// "OpenBLAS 0.3.21" of openblas_get_config()'s "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Prescott ...".
std::string OpenBlasVersion(std::string_view config);

}  // namespace ddprun::env
