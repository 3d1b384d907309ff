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

}  // namespace ddprun::train::cuda

// A grid-stride loop over i < n.
#define DDPRUN_FOR_EACH_INDEX(i, n)                                                    \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
