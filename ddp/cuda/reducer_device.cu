#include <cuda_runtime_api.h>

#include <algorithm>
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

__global__ void ScaledCopy(const float* __restrict__ src, float* __restrict__ dst, size_t n,
                           float factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i] * factor;
  }
}

__global__ void ScaleInPlace(float* data, size_t n, float factor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    data[i] *= factor;
  }
}

unsigned Blocks(size_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

}  // namespace

void DeviceBuckets::Free::operator()(float* p) const { cudaFree(p); }

DeviceBuckets::DeviceBuckets() = default;
// A collective or a copy may still read the buffers: the device finishes
// its work before they are freed.
DeviceBuckets::~DeviceBuckets() {
  if (!buffers_.empty()) cudaDeviceSynchronize();
}

Status DeviceBuckets::Resize(const std::vector<size_t>& counts) {
  // The old buffers may still be read by a collective issued on them.
  if (!buffers_.empty()) {
    if (Status s = CudaStatus(cudaDeviceSynchronize(), "synchronize before re-bucketing");
        !s.ok()) {
      return s;
    }
  }
  buffers_.clear();
  for (size_t count : counts) {
    void* p = nullptr;
    const size_t bytes = (count == 0 ? 1 : count) * sizeof(float);
    if (Status s =
            CudaStatus(cudaMalloc(&p, bytes),
                       ("cudaMalloc of a " + std::to_string(bytes) + "-byte bucket").c_str());
        !s.ok()) {
      return s;
    }
    buffers_.emplace_back(static_cast<float*>(p));
  }
  return Status::Ok();
}

float* DeviceBuckets::data(size_t bucket) const { return buffers_[bucket].get(); }

Status DeviceBuckets::CopyIn(size_t bucket, size_t offset, const float* grad, size_t n) {
  return CudaStatus(cudaMemcpyAsync(data(bucket) + offset, grad, n * sizeof(float),
                                    cudaMemcpyDeviceToDevice, nullptr),
                    "copy a gradient into its bucket");
}

Status DeviceBuckets::CopyOutScaled(size_t bucket, size_t offset, float* grad, size_t n,
                                    float factor) {
  if (n == 0) return Status::Ok();
  ScaledCopy<<<Blocks(n), kThreads>>>(data(bucket) + offset, grad, n, factor);
  return CudaStatus(cudaGetLastError(), "copy a reduced gradient out of its bucket");
}

Status DeviceBuckets::Scale(size_t bucket, size_t count, float factor) {
  if (count == 0) return Status::Ok();
  ScaleInPlace<<<Blocks(count), kThreads>>>(data(bucket), count, factor);
  return CudaStatus(cudaGetLastError(), "average a reduced bucket");
}

Status ZeroDeviceFloats(float* p, size_t n) {
  return CudaStatus(cudaMemsetAsync(p, 0, n * sizeof(float), nullptr), "zero an unused gradient");
}

}  // namespace ddprun::ddp
