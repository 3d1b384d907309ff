// What the trainer's element-wise kernels share: the block size, the grid for
// n elements (grid-stride loops, at most kMaxBlocks blocks) and the loop
// itself. Include only from .cu files.
#pragma once

#include <algorithm>
#include <cstddef>

namespace ddprun::train::cuda {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

inline unsigned Blocks(size_t n) {
  return static_cast<unsigned>(
      std::max<size_t>(1, std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)));
}

// In a one-block kernel of kThreads threads: *loss = the mean over j < n of
// (out(j) - y[j])^2, per-thread partial sums in double, reduced in shared
// memory. `out` maps an index to the model's output as a double.
template <typename Out>
__device__ void MeanSquaredErrorInBlock(Out out, const float* y, int n, double* loss) {
  __shared__ double partial[kThreads];
  double sum = 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const double d = out(j) - y[j];
    sum += d * d;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = partial[0] / n;
}

}  // namespace ddprun::train::cuda

// A grid-stride loop over i < n.
#define DDPRUN_FOR_EACH_INDEX(i, n)                                                    \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
