#include "ddp/cuda/unscale.hpp"

#include <cstdint>

namespace ddprun::ddp {
namespace {

constexpr int kThreads = 256;

// Enough blocks to fill the device a few times over; the grid-stride loops
// cover the rest. The attribute query is cached by the runtime.
int Blocks(size_t work_items) {
  int device = 0;
  int sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  size_t wanted = (work_items + kThreads - 1) / kThreads;
  size_t cap = static_cast<size_t>(sms) * 8;
  return static_cast<int>(wanted < cap ? (wanted == 0 ? 1 : wanted) : cap);
}

__device__ bool UnscaleOne(float& v, float inv_scale) {
  bool bad = !isfinite(v);
  v *= inv_scale;
  return bad;
}

__device__ bool UnscaleAt(float* g, size_t i, float inv_scale, bool write) {
  float v = g[i];
  const bool bad = UnscaleOne(v, inv_scale);
  if (write) g[i] = v;
  return bad;
}

// Scalar head (up to 16-byte alignment), float4 body, scalar tail: each
// element is read once, and written once unless inv_scale is 1 (bf16 and
// fp32 steps, checked without loss scaling: half the traffic).
__global__ void UnscaleAndCheckKernel(float* g, size_t n, float inv_scale, float* found_inf) {
  const bool write = inv_scale != 1.0f;
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t head = ((16 - (reinterpret_cast<uintptr_t>(g) & 15)) & 15) / sizeof(float);
  if (head > n) head = n;
  const size_t body = (n - head) / 4;
  bool bad = false;
  for (size_t i = first; i < head; i += stride) bad |= UnscaleAt(g, i, inv_scale, write);
  float4* g4 = reinterpret_cast<float4*>(g + head);
  for (size_t i = first; i < body; i += stride) {
    float4 v = g4[i];
    bad |= UnscaleOne(v.x, inv_scale) | UnscaleOne(v.y, inv_scale) | UnscaleOne(v.z, inv_scale) |
           UnscaleOne(v.w, inv_scale);
    if (write) g4[i] = v;
  }
  for (size_t i = head + body * 4 + first; i < n; i += stride) {
    bad |= UnscaleAt(g, i, inv_scale, write);
  }
  // One store per block; several blocks storing the same 1.0f is benign.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

__global__ void SumOfSquaresKernel(const float* x, size_t n, double* sum) {
  __shared__ double partial[kThreads];
  double acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    double v = x[i];
    acc += v * v;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, partial[0]);
}

__global__ void ScaleKernel(float* x, size_t n, float factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    x[i] *= factor;
  }
}

}  // namespace

cudaError_t UnscaleAndCheck(float* grads, size_t n, float inv_scale, float* found_inf,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  UnscaleAndCheckKernel<<<Blocks(n / 4 + 4), kThreads, 0, stream>>>(grads, n, inv_scale, found_inf);
  return cudaGetLastError();
}

cudaError_t AddSumOfSquares(const float* x, size_t n, double* sum, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SumOfSquaresKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, sum);
  return cudaGetLastError();
}

cudaError_t ScaleInPlace(float* x, size_t n, float factor, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, factor);
  return cudaGetLastError();
}

}  // namespace ddprun::ddp
