// The Reducer's gradient buckets in device memory, for the NCCL group: one
// flat cudaMalloc'd buffer per bucket, of one element type (float32, float16
// or bfloat16). Either the gradients live in the buckets
// (gradient_as_bucket_view: moved in once, averaged in place) or they are
// copied in (device to device) as they become ready and copied back scaled
// once the bucket's all-reduce has finished.
//
// Every copy and kernel runs on the legacy default stream, so it is ordered
// after the backward work that produced the gradient and before the
// collective the NCCL group issues on that buffer (the group's stream waits
// for the default stream). Functions return the launch error as a Status;
// asynchronous faults surface in a later call. Not thread-safe; the device
// the buffers were allocated on must be current. This header needs no CUDA
// headers: it compiles in any translation unit of a DDPRUN_HAVE_CUDA build.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "base/status.hpp"
#include "ddp/tensor.hpp"

namespace ddprun::ddp {

class DeviceBuckets {
 public:
  DeviceBuckets();
  ~DeviceBuckets();  // waits for the device before freeing
  DeviceBuckets(const DeviceBuckets&) = delete;
  DeviceBuckets& operator=(const DeviceBuckets&) = delete;

  // Frees the old buffers and allocates one of bytes[b] bytes per bucket.
  Status Resize(const std::vector<size_t>& bytes);
  void* data(size_t bucket) const;

  // bucket bytes [offset .. offset+n) = grad bytes [0 .. n), asynchronously.
  Status CopyIn(size_t bucket, size_t byte_offset, const void* grad, size_t n);
  // grad[0 .. n) = bucket[offset .. offset+n) * factor, elements of `dtype`
  // (16-bit values multiplied in float and rounded once), asynchronously.
  Status CopyOutScaled(size_t bucket, size_t offset, void* grad, size_t n, float factor,
                       DType dtype);
  // bucket[0 .. count) *= factor, elements of `dtype`, asynchronously.
  Status Scale(size_t bucket, size_t count, float factor, DType dtype);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::vector<std::unique_ptr<void, Free>> buffers_;
};

// p[0 .. bytes) = 0 on the device, asynchronously.
Status ZeroDeviceBytes(void* p, size_t bytes);

}  // namespace ddprun::ddp
