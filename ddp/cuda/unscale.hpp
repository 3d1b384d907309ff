// The small CUDA kernels of GradScaler: the fused unscale + inf/NaN check
// (one pass over the gradients, as torch._amp_foreach_non_finite_check_and_unscale_),
// and the two halves of clipping by norm.
//
// Every function is asynchronous on `stream`, touches only device memory,
// and returns the launch error (cudaSuccess when nothing had to run).
// Safe to call from any thread that has the right device current.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ddprun::ddp {

// grads[i] *= inv_scale for i < n (nothing written when inv_scale is 1), and
// *found_inf = 1.0f when any grads[i] was inf or NaN before the multiply. Never clears *found_inf:
// the caller zeroes it, so one flag can collect several calls. REQUIRES: grads 4-byte aligned
// (float4 is used where 16-byte aligned).
cudaError_t UnscaleAndCheck(float* grads, size_t n, float inv_scale, float* found_inf,
                            cudaStream_t stream);

// *sum += sum of x[i]^2 for i < n, accumulated in double.
cudaError_t AddSumOfSquares(const float* x, size_t n, double* sum, cudaStream_t stream);

// x[i] *= factor for i < n.
cudaError_t ScaleInPlace(float* x, size_t n, float factor, cudaStream_t stream);

}  // namespace ddprun::ddp
