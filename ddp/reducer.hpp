// Data-parallel gradient reduction, the core of DDP.
//
// The model registers its parameters (name, shape, data and gradient
// buffers) and buffers. At construction every rank checks that all ranks
// registered the same names and shapes (a mismatch names the first differing
// parameter on each side, never hangs) and takes rank 0's parameters and
// buffers. During backward the model calls MarkGradReady(i) as soon as
// parameter i's gradient is final; parameters are grouped into buckets
// (reverse registration order, 1 MiB first bucket, 25 MiB cap, one element
// type per bucket; rebuilt once from the order observed in the first step,
// agreed with rank 0), and a bucket's all-reduce starts as soon as its last
// gradient is ready and every earlier bucket has started, so communication
// overlaps the rest of backward. FinishBackward() waits for the buckets and
// averages by the world size: float32 buckets after the sum, 16-bit ones
// before it (as PyTorch divides first: a sum of half values could overflow).
//
// Unused parameters: without find_unused_parameters, the first step in which
// parameters got no gradient fails, listing them by name and shape with both
// fixes; with it, they are reduced as zeros.
//
// Gradients as bucket views (ReducerOptions::gradient_as_bucket_view, as
// PyTorch's option of that name): the reducer owns the gradient storage. At
// construction, and again when the buckets are rebuilt after the first step,
// it moves every gradient into its bucket (values kept) and points
// parameters()[i].grad there; the model must then write each gradient
// through that pointer (re-read it whenever layout_generation() changes).
// Backward's results are then reduced where they were written and averaged
// in place: no copy into the buckets, none out. Without the option the
// model keeps its gradient buffers and the reducer copies each gradient into
// its bucket when it is ready and back, averaged, after the reduction.
//
// Device memory: with the NCCL group (backend() "nccl") parameters, gradients
// and buffers are CUDA device memory of the current device; the buckets are
// then flat device buffers, written (views) or filled by device-to-device
// copies on the legacy default stream (after the backward work that made
// each gradient), reduced in place by NCCL on the group's own stream, and
// averaged by a small kernel that the legacy stream runs once the reduction
// is done: FinishBackward() does not wait on the host for a device
// collective (a failed one fails a later collective or step). The parameter
// and buffer broadcasts go straight to NCCL on the device pointers. Every
// other group keeps everything in host memory.
//
// Not thread-safe: drive it from the training thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.hpp"
#include "ddp/process_group.hpp"
#include "ddp/tensor.hpp"

namespace ddprun::ddp {

struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;  // numel elements (host or device, as the group's device)
  float* grad = nullptr;  // numel elements
  // The element type of data and grad: float32, or float16/bfloat16, whose
  // 16-bit storage the two pointers then carry (read it as uint16_t: data16(),
  // grad16()). Gradients of each type go to buckets of that type.
  DType dtype = DType::kFloat32;
  size_t numel() const;
  size_t bytes() const { return numel() * SizeOf(dtype); }
  uint16_t* data16() const { return reinterpret_cast<uint16_t*>(data); }
  uint16_t* grad16() const { return reinterpret_cast<uint16_t*>(grad); }
};

struct Buffer {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
  size_t numel() const;
};

struct ReducerOptions {
  size_t bucket_cap_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  // The gradients live in the buckets (see above).
  bool gradient_as_bucket_view = false;
  // After this many steps with no unused parameter, say once that
  // find_unused_parameters costs time for nothing.
  int unused_notice_after = 100;
  // Settings every rank must share (name, value), such as {"amp", "fp16"} or
  // {"steps", "30"}: ranks that differ reduce gradients of different scales,
  // or end up in different collectives, so Create fails naming the first that
  // differs. Compared once, with the parameters' names and shapes.
  std::vector<std::pair<std::string, std::string>> same_on_every_rank;
  // Check each gradient for inf/NaN as it becomes ready, before the
  // all-reduce spreads it to every rank: NonFiniteOrigin() then names the
  // ranks and parameters it came from (ddp/nonfinite.hpp). A pass over the
  // gradients each step; host memory only (not supported yet on CUDA).
  bool find_nonfinite_origin = false;
};

// What a step's reduction did, for tests and the trainer's log.
struct StepStats {
  int buckets = 0;
  std::vector<std::chrono::steady_clock::time_point> bucket_started;  // launch times
  std::vector<size_t> unused;                                         // parameter indices
  // With find_nonfinite_origin: the parameters whose gradients this rank
  // made non-finite (before the reduction).
  std::vector<size_t> nonfinite;
};

class Reducer {
 public:
  static StatusOr<std::unique_ptr<Reducer>> Create(ProcessGroup* group,
                                                   std::vector<Parameter> params,
                                                   std::vector<Buffer> buffers,
                                                   ReducerOptions options);
  ~Reducer();

  // Broadcasts buffers from rank 0 (when broadcast_buffers).
  Status BeforeForward();
  // Resets the step's bookkeeping; call before backward.
  void BeginBackward();
  // Parameter `index`'s gradient is final for this step.
  void MarkGradReady(size_t index);
  // Waits for every bucket, averages, checks for unused parameters.
  Status FinishBackward();

  // Gradient accumulation: while on, backward reduces nothing.
  void set_no_sync(bool on) { no_sync_ = on; }

  // The parameters as registered; with gradient_as_bucket_view their grad
  // pointers point into the buckets.
  const std::vector<Parameter>& parameters() const { return params_; }
  // Counts the moves of the gradient storage into buckets (with
  // gradient_as_bucket_view: 1 after construction, 2 after the rebuild);
  // always 0 without the option.
  int layout_generation() const;
  const StepStats& last_step() const { return stats_; }
  // Bucket layout: parameter indices per bucket, in launch order.
  const std::vector<std::vector<size_t>>& buckets() const;
  // A notice to print once (e.g. find_unused_parameters costing time), or "".
  std::string TakeNotice();
  // With find_nonfinite_origin, after FinishBackward: which ranks made which
  // gradients inf/NaN this step, "rank 1 (layers.1.weight)", or "" when none
  // did before the reduction. Collective: every rank calls it at the same
  // step (e.g. when the grad scaler found inf/NaN, which every rank agrees on).
  StatusOr<std::string> NonFiniteOrigin();

  class Impl;
  struct Key {
    explicit Key() = default;
  };
  Reducer(Key, std::unique_ptr<Impl> impl, std::vector<Parameter> params);  // use Create()

 private:
  std::unique_ptr<Impl> impl_;
  std::vector<Parameter> params_;
  StepStats stats_;
  bool no_sync_ = false;
  friend class Impl;
};

}  // namespace ddprun::ddp
