// The Reducer's gradient buckets in device memory, for the NCCL group: one
// flat cudaMalloc'd buffer per bucket. Either the gradients live in the
// buckets (gradient_as_bucket_view: moved in once, averaged in place) or
// they are copied in (device to device) as they become ready and copied back
// scaled once the bucket's all-reduce has finished.
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

namespace ddprun::ddp {

class DeviceBuckets {
 public:
  DeviceBuckets();
  ~DeviceBuckets();
  DeviceBuckets(const DeviceBuckets&) = delete;
  DeviceBuckets& operator=(const DeviceBuckets&) = delete;

  // Frees the old buffers and allocates one of counts[b] floats per bucket.
  Status Resize(const std::vector<size_t>& counts);
  float* data(size_t bucket) const;

  // bucket[offset .. offset+n) = grad[0 .. n), asynchronously.
  Status CopyIn(size_t bucket, size_t offset, const float* grad, size_t n);
  // grad[0 .. n) = bucket[offset .. offset+n) * factor, asynchronously.
  Status CopyOutScaled(size_t bucket, size_t offset, float* grad, size_t n, float factor);
  // bucket[0 .. count) *= factor, asynchronously.
  Status Scale(size_t bucket, size_t count, float factor);

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::vector<std::unique_ptr<float, Free>> buffers_;
};

// p[0 .. n) = 0 on the device, asynchronously.
Status ZeroDeviceFloats(float* p, size_t n);

}  // namespace ddprun::ddp
