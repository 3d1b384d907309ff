// What the trainer's element-wise kernels share: the block size, the grid for
// n elements (grid-stride loops, at most kMaxBlocks blocks) and the loop
// itself, the 16-bit formats, and the in-block reductions. Include only from
// .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ddprun::train::cuda {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

inline unsigned Blocks(size_t n) {
  return static_cast<unsigned>(
      std::max<size_t>(1, std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)));
}

// The 16-bit formats, read and written through their bits.
struct Fp16 {
  __device__ static float Load(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
  __device__ static uint16_t Round(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

struct Bf16 {
  __device__ static float Load(uint16_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  }
  __device__ static uint16_t Round(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};

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

// Column sums of a rows x cols row-major matrix, as a reduction: a block of
// kSumCols x kSumRows threads takes kSumCols adjacent columns (coalesced
// loads), each thread sums every kSumRows-th row of its column, and the block
// adds the partial sums in shared memory. One thread per column summing every
// row was latency-bound: about 0.1 ms a call whatever the width, four calls
// and the running mean's in every step. Launch SumBlocks(cols) blocks of
// SumThreads(); store(c, sum) writes column c's sum.
constexpr int kSumCols = 32;
constexpr int kSumRows = 32;

inline unsigned SumBlocks(int cols) {
  return static_cast<unsigned>((cols + kSumCols - 1) / kSumCols);
}
inline dim3 SumThreads() { return dim3(kSumCols, kSumRows); }

template <typename Load, typename Store>
__device__ void ColumnSumsInBlock(Load load, int rows, int cols, Store store) {
  __shared__ float partial[kSumRows][kSumCols + 1];
  const int c = static_cast<int>(blockIdx.x) * kSumCols + static_cast<int>(threadIdx.x);
  float sum = 0;
  if (c < cols) {
    for (int j = static_cast<int>(threadIdx.y); j < rows; j += kSumRows) {
      sum += load(static_cast<size_t>(j) * cols + c);
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (int half = kSumRows / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.y) < half) {
      partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) store(c, partial[0][threadIdx.x]);
}

// ColumnSumsInBlock's plain store: sums[c] = the column's sum.
struct StoreSum {
  float* sums;
  __device__ void operator()(int c, float sum) const { sums[c] = sum; }
};

}  // namespace ddprun::train::cuda

// A grid-stride loop over i < n.
#define DDPRUN_FOR_EACH_INDEX(i, n)                                                    \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
