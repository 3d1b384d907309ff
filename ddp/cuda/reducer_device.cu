#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ddp/cuda/reducer_device.hpp"

namespace ddprun::ddp {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string("ddp: ") + what + ": " + cudaGetErrorString(err));
}

unsigned Blocks(size_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

// The element types, multiplied in float and stored back rounded once.
struct F32 {
  using T = float;
  __device__ static T Scaled(T v, float factor) { return v * factor; }
};
struct F16 {
  using T = __half;
  __device__ static T Scaled(T v, float factor) {
    return __float2half_rn(__half2float(v) * factor);
  }
};
struct BF16 {
  using T = __nv_bfloat16;
  __device__ static T Scaled(T v, float factor) {
    return __float2bfloat16_rn(__bfloat162float(v) * factor);
  }
};

// dst[i] = src[i] * factor; dst may be src (then in place).
template <typename E>
__global__ void ScaledCopy(const typename E::T* src, typename E::T* dst, size_t n, float factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    dst[i] = E::Scaled(src[i], factor);
  }
}

template <typename E>
void LaunchScaled(const void* src, void* dst, size_t n, float factor) {
  using T = typename E::T;
  ScaledCopy<E>
      <<<Blocks(n), kThreads>>>(static_cast<const T*>(src), static_cast<T*>(dst), n, factor);
}

// dst[0 .. n) = src[0 .. n) * factor, elements of `dtype` (float32, float16 or
// bfloat16; the reducer holds no other).
Status Scaled(DType dtype, const void* src, void* dst, size_t n, float factor, const char* what) {
  if (n == 0) return Status::Ok();
  switch (dtype) {
    case DType::kFloat16:
      LaunchScaled<F16>(src, dst, n, factor);
      break;
    case DType::kBFloat16:
      LaunchScaled<BF16>(src, dst, n, factor);
      break;
    case DType::kFloat32:
      LaunchScaled<F32>(src, dst, n, factor);
      break;
    default:
      return InvalidArgument(std::string("ddp: ") + what + ": gradients of type " +
                             DTypeName(dtype) +
                             " cannot be averaged: use float32, float16 or "
                             "bfloat16 parameters");
  }
  return CudaStatus(cudaGetLastError(), what);
}

}  // namespace

void DeviceBuckets::Free::operator()(void* p) const { cudaFree(p); }

DeviceBuckets::DeviceBuckets() = default;

// A collective or a copy may still read the buffers: the device finishes
// its work before they are freed.
DeviceBuckets::~DeviceBuckets() {
  if (!buffers_.empty()) cudaDeviceSynchronize();
}

Status DeviceBuckets::Resize(const std::vector<size_t>& bytes) {
  // The old buffers may still be read by a collective issued on them.
  if (!buffers_.empty()) {
    if (Status s = CudaStatus(cudaDeviceSynchronize(), "synchronize before re-bucketing");
        !s.ok()) {
      return s;
    }
  }
  buffers_.clear();
  for (size_t size : bytes) {
    void* p = nullptr;
    const size_t n = size == 0 ? 1 : size;
    if (Status s = CudaStatus(cudaMalloc(&p, n),
                              ("cudaMalloc of a " + std::to_string(n) + "-byte bucket").c_str());
        !s.ok()) {
      return s;
    }
    buffers_.emplace_back(p);
  }
  return Status::Ok();
}

void* DeviceBuckets::data(size_t bucket) const { return buffers_[bucket].get(); }

Status DeviceBuckets::CopyIn(size_t bucket, size_t byte_offset, const void* grad, size_t n) {
  return CudaStatus(cudaMemcpyAsync(static_cast<char*>(data(bucket)) + byte_offset, grad, n,
                                    cudaMemcpyDeviceToDevice, cudaStreamLegacy),
                    "copy a gradient into its bucket");
}

Status DeviceBuckets::CopyOutScaled(size_t bucket, size_t offset, void* grad, size_t n,
                                    float factor, DType dtype) {
  const char* src = static_cast<const char*>(data(bucket)) + offset * SizeOf(dtype);
  return Scaled(dtype, src, grad, n, factor, "copy a reduced gradient out of its bucket");
}

Status DeviceBuckets::Scale(size_t bucket, size_t count, float factor, DType dtype) {
  return Scaled(dtype, data(bucket), data(bucket), count, factor, "average a bucket");
}

Status ZeroDeviceBytes(void* p, size_t bytes) {
  return CudaStatus(cudaMemsetAsync(p, 0, bytes, cudaStreamLegacy), "zero an unused gradient");
}

}  // namespace ddprun::ddp
