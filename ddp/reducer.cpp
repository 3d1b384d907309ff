#include "ddp/reducer.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "ddp/gloo_reduce.hpp"
#include "ddp/nonfinite.hpp"

#ifdef DDPRUN_HAVE_CUDA
#include "ddp/cuda/reducer_device.hpp"
#endif

namespace ddprun::ddp {

namespace {

size_t Numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string Shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Signature(const std::vector<Parameter>& params) {
  std::string s;
  for (const auto& p : params) {
    s += p.name + " " + Shape(p.shape);
    if (p.dtype != DType::kFloat32) s += std::string(" ") + DTypeName(p.dtype);
    s += "\n";
  }
  return s;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Groups parameter indices, taken in `order`, into buckets of one element
// type each: per type the first up to `first_cap` bytes, the rest up to
// `cap`. Buckets are numbered as they are opened.
std::vector<std::vector<size_t>> MakeBuckets(const std::vector<Parameter>& params,
                                             const std::vector<size_t>& order, size_t first_cap,
                                             size_t cap) {
  struct Open {
    size_t bucket = 0;
    size_t bytes = 0;
    int opened = 0;  // buckets of this type so far
  };
  std::vector<std::vector<size_t>> buckets;
  std::map<DType, Open> open;
  for (size_t idx : order) {
    const size_t size = params[idx].bytes();
    auto [it, first] = open.emplace(params[idx].dtype, Open{});
    Open& o = it->second;
    const size_t limit = o.opened == 1 ? first_cap : cap;
    if (first || (o.bytes > 0 && o.bytes + size > limit)) {
      o = Open{buckets.size(), 0, o.opened + 1};
      buckets.emplace_back();
    }
    buckets[o.bucket].push_back(idx);
    o.bytes += size;
  }
  return buckets;
}

// Host memory, element by element: dst[k] = src[k] * factor in the element
// type (16-bit values widened to float, multiplied, rounded back once). `dst`
// may be `src`.
void ScaleHost(DType dtype, const void* src, void* dst, size_t n, float factor) {
  if (dtype == DType::kFloat32) {
    const auto* in = static_cast<const float*>(src);
    auto* out = static_cast<float*>(dst);
    for (size_t k = 0; k < n; ++k) out[k] = in[k] * factor;
    return;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  auto* out = static_cast<uint16_t*>(dst);
  for (size_t k = 0; k < n; ++k) {
    out[k] = dtype == DType::kBFloat16 ? FloatToBFloat16(BFloat16ToFloat(in[k]) * factor)
                                       : FloatToHalfBits(HalfBitsToFloat(in[k]) * factor);
  }
}

}  // namespace

size_t Parameter::numel() const { return Numel(shape); }
size_t Buffer::numel() const { return Numel(shape); }

// With the NCCL group, parameters, gradients and buffers are device memory:
// the buckets live on the device too (DeviceBuckets) and nothing is copied
// through the host. Every other group keeps host buckets.
bool OnDevice(const ProcessGroup* group) { return std::strcmp(group->backend(), "nccl") == 0; }

class Reducer::Impl {
 public:
  Impl(ProcessGroup* group, std::vector<Buffer> buffers, ReducerOptions options)
      : group_(group), buffers_(std::move(buffers)), options_(std::move(options)) {}

  Status InitDevice();

  Status VerifyAcrossRanks(const std::vector<Parameter>& params);
  Status VerifySettings();
  Status BroadcastFromRankZero(std::vector<Parameter>& params);
  Status Layout(std::vector<Parameter>& params, const std::vector<size_t>& order);
  Status BroadcastBuffers();
  void Begin(size_t nparams);
  void Ready(Reducer& r, size_t index);
  Status Finish(Reducer& r);

  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  std::string TakeNotice() { return std::exchange(notice_, ""); }
  int generation() const { return generation_; }
  ProcessGroup* group() const { return group_; }

 private:
  void Launch(Reducer& r);
  Status BroadcastInPlace(const std::vector<TensorView>& tensors);
  // Bucket b's storage; Element(b, offset): its element `offset`.
  char* FlatData(size_t b);
  char* Element(size_t b, size_t offset) { return FlatData(b) + offset * SizeOf(dtype_[b]); }
  // 16-bit buckets are divided by the world size before the sum, float32 after it.
  bool Predivides(size_t b) const { return dtype_[b] != DType::kFloat32; }
  Status CopyIn(size_t b, const Parameter& p, size_t offset);
  Status CopyOut(size_t b, Parameter& p, size_t offset, float factor);
  Status Average(size_t b, std::vector<Parameter>& params, float factor);
  Status ZeroGrad(Parameter& p);
  Status MoveGradsInto(std::vector<Parameter>& params);
  Status RebuildFromRankZero(std::vector<Parameter>& params);
  Status ReportUnused(const std::vector<Parameter>& params, const std::vector<size_t>& unused);

  ProcessGroup* group_;
  std::vector<Buffer> buffers_;
  ReducerOptions options_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<size_t> bucket_of_, offset_in_bucket_, counts_;  // counts_: elements
  std::vector<DType> dtype_;                                   // per bucket
  std::vector<std::vector<float>> flat_;                       // host buckets (float-aligned bytes)
#ifdef DDPRUN_HAVE_CUDA
  std::unique_ptr<DeviceBuckets> device_;  // device buckets (nccl), instead
#endif
  bool on_device_ = false;
  int generation_ = 0;  // moves of the gradients into buckets (views)
  Status copy_error_;   // the first failed device copy of the step
  std::vector<size_t> pending_;
  std::vector<bool> param_ready_;
  std::vector<std::shared_ptr<Work>> works_;
  size_t next_launch_ = 0;
  std::vector<size_t> observed_order_;
  bool rebuilt_ = false;
  long step_ = 0;
  int steps_without_unused_ = 0;
  bool noticed_ = false;
  std::string notice_;
};

namespace {

// The first line in which a rank's text differs from rank 0's, of every
// rank's `mine` gathered: (that rank, the line's index, rank 0's line and the
// rank's, or `missing(count)` for a text that has no such line).
struct Difference {
  int rank = 0;
  size_t index = 0;
  std::string reference, theirs;
};
StatusOr<std::optional<Difference>> FirstDifference(
    ProcessGroup& group, const std::string& mine,
    const std::function<std::string(size_t lines)>& missing) {
  auto all = group.AllGatherStrings(mine);
  if (!all.ok()) return all.status();
  const auto reference = Lines((*all)[0]);
  for (int r = 1; r < group.size(); ++r) {
    if ((*all)[r] == (*all)[0]) continue;
    const auto theirs = Lines((*all)[r]);
    size_t i = 0;
    while (i < reference.size() && i < theirs.size() && reference[i] == theirs[i]) ++i;
    auto at = [&](const std::vector<std::string>& v) {
      return i < v.size() ? v[i] : missing(v.size());
    };
    return std::optional<Difference>(Difference{r, i, at(reference), at(theirs)});
  }
  return std::optional<Difference>();
}

}  // namespace

Status Reducer::Impl::VerifyAcrossRanks(const std::vector<Parameter>& params) {
  auto d = FirstDifference(*group_, Signature(params), [](size_t n) {
    return "nothing (" + std::to_string(n) + " parameters in all)";
  });
  if (!d.ok()) return d.status().Annotate("ddp: comparing parameters across ranks");
  if (*d) {
    return InvalidArgument("ddp: the model differs between ranks at parameter #" +
                           std::to_string((*d)->index) + ": rank 0 has " + (*d)->reference +
                           ", rank " + std::to_string((*d)->rank) + " has " + (*d)->theirs +
                           ": every rank must build the same model (same layers, same order)");
  }
  return VerifySettings();
}

Status Reducer::Impl::VerifySettings() {
  // The caller's settings, then the reducer's own that shape the buckets: a
  // rank with other caps would all-reduce buckets of other sizes at step 0,
  // before the layout is agreed (Gloo aborts the process; attack 91).
  std::string text;
  for (const auto& [name, value] : options_.same_on_every_rank) text += name + "=" + value + "\n";
  text += "bucket_cap_bytes=" + std::to_string(options_.bucket_cap_bytes) + "\n";
  text += "first_bucket_bytes=" + std::to_string(options_.first_bucket_bytes) + "\n";
  auto d = FirstDifference(*group_, text,
                           [](size_t n) { return "no setting after its " + std::to_string(n); });
  if (!d.ok()) return d.status().Annotate("ddp: comparing settings across ranks");
  if (!*d) return Status::Ok();
  return InvalidArgument(
      "ddp: the ranks' settings differ: rank 0 has " + (*d)->reference + ", rank " +
      std::to_string((*d)->rank) + " has " + (*d)->theirs +
      ": every rank must train with the same settings (ranks that differ reduce gradients of "
      "different scales, or wait in different collectives)");
}

Status Reducer::Impl::InitDevice() {
  on_device_ = OnDevice(group_);
  if (!on_device_) return Status::Ok();
#ifdef DDPRUN_HAVE_CUDA
  device_ = std::make_unique<DeviceBuckets>();
  return Status::Ok();
#else
  return Unimplemented(
      "ddp: the process group is nccl but ddprun was built without CUDA: rebuild where cmake "
      "finds CUDA and NCCL");
#endif
}

// Host memory goes through one flat buffer of bytes (one collective); device
// memory is broadcast tensor by tensor in place (NCCL takes the device pointers).
Status Reducer::Impl::BroadcastInPlace(const std::vector<TensorView>& tensors) {
  if (on_device_) {
    std::vector<std::shared_ptr<Work>> works;
    for (const TensorView& t : tensors) {
      if (t.count != 0) works.push_back(group_->Broadcast(t, 0));
    }
    for (auto& w : works) {
      if (Status s = w->Wait(); !s.ok()) return s;
    }
    return Status::Ok();
  }
  std::vector<uint8_t> flat;
  for (const TensorView& t : tensors) {
    const auto* bytes = static_cast<const uint8_t*>(t.data);
    flat.insert(flat.end(), bytes, bytes + t.bytes());
  }
  if (flat.empty()) return Status::Ok();
  const TensorView all{flat.data(), flat.size(), DType::kUInt8, Device::kCpu};
  if (Status s = group_->Broadcast(all, 0)->Wait(); !s.ok()) return s;
  size_t off = 0;
  for (const TensorView& t : tensors) {
    std::memcpy(t.data, flat.data() + off, t.bytes());
    off += t.bytes();
  }
  return Status::Ok();
}

Status Reducer::Impl::BroadcastFromRankZero(std::vector<Parameter>& params) {
  const Device device = on_device_ ? Device::kCuda : Device::kCpu;
  std::vector<TensorView> tensors;
  for (const auto& p : params) tensors.push_back({p.data, p.numel(), p.dtype, device});
  for (const auto& b : buffers_) tensors.push_back(View(b.data, b.numel(), device));
  return BroadcastInPlace(tensors);
}

Status Reducer::Impl::Layout(std::vector<Parameter>& params, const std::vector<size_t>& order) {
  buckets_ = MakeBuckets(params, order, options_.first_bucket_bytes, options_.bucket_cap_bytes);
  bucket_of_.assign(params.size(), 0);
  offset_in_bucket_.assign(params.size(), 0);
  counts_.assign(buckets_.size(), 0);
  dtype_.assign(buckets_.size(), DType::kFloat32);
  std::vector<size_t> bytes(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t idx : buckets_[b]) {
      bucket_of_[idx] = b;
      offset_in_bucket_[idx] = counts_[b];
      counts_[b] += params[idx].numel();
      dtype_[b] = params[idx].dtype;
    }
    bytes[b] = counts_[b] * SizeOf(dtype_[b]);
  }
  // New storage first: with views, the gradients move out of the old one.
#ifdef DDPRUN_HAVE_CUDA
  if (on_device_) {
    auto old = std::move(device_);
    device_ = std::make_unique<DeviceBuckets>();
    if (Status s = device_->Resize(bytes); !s.ok()) return s;
    return MoveGradsInto(params);  // then `old` is freed (after the device is idle)
  }
#endif
  auto old = std::move(flat_);
  flat_.assign(buckets_.size(), {});
  for (size_t b = 0; b < buckets_.size(); ++b) flat_[b].resize((bytes[b] + 3) / 4);
  return MoveGradsInto(params);
}

// gradient_as_bucket_view: every gradient's values go to its place in the
// (new) buckets, and its pointer with them.
Status Reducer::Impl::MoveGradsInto(std::vector<Parameter>& params) {
  if (!options_.gradient_as_bucket_view) return Status::Ok();
  for (size_t idx = 0; idx < params.size(); ++idx) {
    Parameter& p = params[idx];
    if (Status s = CopyIn(bucket_of_[idx], p, offset_in_bucket_[idx]); !s.ok()) {
      return s.Annotate("ddp: moving the gradient of " + p.name + " into its bucket");
    }
    p.grad = reinterpret_cast<float*>(Element(bucket_of_[idx], offset_in_bucket_[idx]));
  }
  ++generation_;
  return Status::Ok();
}

char* Reducer::Impl::FlatData(size_t b) {
#ifdef DDPRUN_HAVE_CUDA
  if (device_) return static_cast<char*>(device_->data(b));
#endif
  return reinterpret_cast<char*>(flat_[b].data());
}

Status Reducer::Impl::CopyIn(size_t b, const Parameter& p, size_t offset) {
#ifdef DDPRUN_HAVE_CUDA
  if (device_) return device_->CopyIn(b, offset * SizeOf(p.dtype), p.grad, p.bytes());
#endif
  std::memcpy(Element(b, offset), p.grad, p.bytes());
  return Status::Ok();
}

Status Reducer::Impl::CopyOut(size_t b, Parameter& p, size_t offset, float factor) {
#ifdef DDPRUN_HAVE_CUDA
  if (device_) return device_->CopyOutScaled(b, offset, p.grad, p.numel(), factor, p.dtype);
#endif
  ScaleHost(p.dtype, Element(b, offset), p.grad, p.numel(), factor);
  return Status::Ok();
}

// The reduced bucket `b` divided by the world size (unless it was divided
// before the sum): in place (views), or copied out into each parameter's own
// gradient.
Status Reducer::Impl::Average(size_t b, std::vector<Parameter>& params, float factor) {
  if (Predivides(b)) factor = 1.0f;
  if (!options_.gradient_as_bucket_view) {
    for (size_t idx : buckets_[b]) {
      if (Status s = CopyOut(b, params[idx], offset_in_bucket_[idx], factor); !s.ok()) return s;
    }
    return Status::Ok();
  }
  if (factor == 1.0f) return Status::Ok();
#ifdef DDPRUN_HAVE_CUDA
  if (device_) return device_->Scale(b, counts_[b], factor, dtype_[b]);
#endif
  ScaleHost(dtype_[b], FlatData(b), FlatData(b), counts_[b], factor);
  return Status::Ok();
}

Status Reducer::Impl::ZeroGrad(Parameter& p) {
#ifdef DDPRUN_HAVE_CUDA
  if (device_) return ZeroDeviceBytes(p.grad, p.bytes());
#endif
  std::memset(p.grad, 0, p.bytes());
  return Status::Ok();
}

Status Reducer::Impl::BroadcastBuffers() {
  if (!options_.broadcast_buffers || buffers_.empty()) return Status::Ok();
  const Device device = on_device_ ? Device::kCuda : Device::kCpu;
  std::vector<TensorView> tensors;
  for (const auto& b : buffers_) tensors.push_back(View(b.data, b.numel(), device));
  return BroadcastInPlace(tensors);
}

void Reducer::Impl::Begin(size_t nparams) {
  pending_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].size();
  param_ready_.assign(nparams, false);
  works_.assign(buckets_.size(), nullptr);
  next_launch_ = 0;
  observed_order_.clear();
  copy_error_ = Status::Ok();
}

// Buckets start in index order on every rank (collectives must be issued in
// the same order everywhere), each as soon as it and all before it are full.
void Reducer::Impl::Launch(Reducer& r) {
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
    const size_t b = next_launch_;
    const Device device = on_device_ ? Device::kCuda : Device::kCpu;
    if (Predivides(b) && group_->size() > 1) {
      const float inv = 1.0f / static_cast<float>(group_->size());
      Status s = Status::Ok();
#ifdef DDPRUN_HAVE_CUDA
      if (device_) s = device_->Scale(b, counts_[b], inv, dtype_[b]);
#endif
      if (!on_device_) ScaleHost(dtype_[b], FlatData(b), FlatData(b), counts_[b], inv);
      if (!s.ok() && copy_error_.ok()) copy_error_ = s.Annotate("dividing a bucket");
    }
    const TensorView t{FlatData(b), counts_[b], dtype_[b], device};
    works_[b] = group_->AllReduce(t, ReduceOp::kSum);
    r.stats_.bucket_started.push_back(std::chrono::steady_clock::now());
    ++next_launch_;
  }
}

void Reducer::Impl::Ready(Reducer& r, size_t index) {
  if (param_ready_[index]) return;
  param_ready_[index] = true;
  observed_order_.push_back(index);
  const Parameter& p = r.params_[index];
  if (options_.find_nonfinite_origin && !GradFinite(p)) r.stats_.nonfinite.push_back(index);
  const size_t b = bucket_of_[index];
  if (!options_.gradient_as_bucket_view) {
    if (Status s = CopyIn(b, p, offset_in_bucket_[index]); !s.ok() && copy_error_.ok()) {
      copy_error_ = s.Annotate("parameter " + p.name);
    }
  }
  --pending_[b];
  Launch(r);
}

Status Reducer::Impl::ReportUnused(const std::vector<Parameter>& params,
                                   const std::vector<size_t>& unused) {
  std::string names;
  for (size_t idx : unused) {
    names += (names.empty() ? "" : ", ") + params[idx].name + " " + Shape(params[idx].shape);
  }
  return InvalidArgument(
      "ddp: rank " + std::to_string(group_->rank()) + ", step " + std::to_string(step_) + ": " +
      std::to_string(unused.size()) + " parameter(s) got no gradient: " + names +
      ". Either remove them from the model (or stop registering them), or construct the "
      "reducer with find_unused_parameters=true (train: --find-unused-parameters), which "
      "reduces them as zeros at the cost of a pass over all parameters every step");
}

Status Reducer::Impl::RebuildFromRankZero(std::vector<Parameter>& params) {
  std::string order;
  for (size_t idx : observed_order_) order += std::to_string(idx) + " ";
  auto all = group_->AllGatherStrings(order);
  if (!all.ok()) return all.status().Annotate("ddp: agreeing on the bucket order");
  std::vector<size_t> agreed;
  std::istringstream in((*all)[0]);
  for (size_t idx; in >> idx;) agreed.push_back(idx);
  rebuilt_ = true;
  if (agreed.size() == params.size()) return Layout(params, agreed);
  return Status::Ok();
}

Status Reducer::Impl::Finish(Reducer& r) {
  std::vector<size_t> unused;
  for (size_t i = 0; i < param_ready_.size(); ++i) {
    if (!param_ready_[i]) unused.push_back(i);
  }
  r.stats_.unused = unused;
  if (!unused.empty() && !options_.find_unused_parameters) {
    for (auto& w : works_) {
      if (w) (void)w->Wait();
    }
    return ReportUnused(r.params_, unused);
  }
  for (size_t idx : unused) {
    if (Status s = ZeroGrad(r.params_[idx]); !s.ok()) return s;
    Ready(r, idx);
  }
  if (options_.find_unused_parameters) {
    steps_without_unused_ = unused.empty() ? steps_without_unused_ + 1 : 0;
    if (!noticed_ && steps_without_unused_ >= options_.unused_notice_after) {
      noticed_ = true;
      notice_ = "ddp: find_unused_parameters is on but no parameter went unused for " +
                std::to_string(steps_without_unused_) +
                " steps: turn it off to save a pass over the parameters every step";
    }
  }
  const float inv = 1.0f / static_cast<float>(group_->size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (Status s = works_[b]->Synchronize(); !s.ok()) return s;
    if (Status s = Average(b, r.params_, inv); !s.ok()) return s;
  }
  if (!copy_error_.ok()) return copy_error_;
  r.stats_.buckets = static_cast<int>(buckets_.size());
  ++step_;
  if (!rebuilt_) return RebuildFromRankZero(r.params_);
  return Status::Ok();
}

Reducer::Reducer(Key, std::unique_ptr<Impl> impl, std::vector<Parameter> params)
    : impl_(std::move(impl)), params_(std::move(params)) {}

Reducer::~Reducer() = default;

StatusOr<std::unique_ptr<Reducer>> Reducer::Create(ProcessGroup* group,
                                                   std::vector<Parameter> params,
                                                   std::vector<Buffer> buffers,
                                                   ReducerOptions options) {
  for (const Parameter& p : params) {
    if (p.dtype != DType::kFloat32 && p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16) {
      return InvalidArgument("ddp: parameter " + p.name + " is " + DTypeName(p.dtype) +
                             ": the reducer averages float32, float16 and bfloat16 gradients "
                             "only; register it as one of those (or as a buffer)");
    }
  }
  if (options.find_nonfinite_origin && OnDevice(group)) {
    return Unimplemented(
        "ddp: finding where inf/NaN gradients came from is not supported yet on CUDA: "
        "turn find_nonfinite_origin off there");
  }
  auto impl = std::make_unique<Impl>(group, std::move(buffers), std::move(options));
  if (Status s = impl->InitDevice(); !s.ok()) return s;
  if (Status s = impl->VerifyAcrossRanks(params); !s.ok()) return s;
  if (Status s = impl->BroadcastFromRankZero(params); !s.ok()) {
    return s.Annotate("ddp: broadcasting parameters from rank 0");
  }
  std::vector<size_t> reverse(params.size());
  for (size_t i = 0; i < params.size(); ++i) reverse[i] = params.size() - 1 - i;
  if (Status s = impl->Layout(params, reverse); !s.ok()) return s;
  return std::make_unique<Reducer>(Key{}, std::move(impl), std::move(params));
}

Status Reducer::BeforeForward() { return impl_->BroadcastBuffers(); }

void Reducer::BeginBackward() {
  stats_ = StepStats{};
  impl_->Begin(params_.size());
}

void Reducer::MarkGradReady(size_t index) {
  if (no_sync_) return;
  impl_->Ready(*this, index);
}

Status Reducer::FinishBackward() {
  if (no_sync_) return Status::Ok();
  return impl_->Finish(*this);
}

const std::vector<std::vector<size_t>>& Reducer::buckets() const { return impl_->buckets(); }

int Reducer::layout_generation() const { return impl_->generation(); }

std::string Reducer::TakeNotice() { return impl_->TakeNotice(); }

StatusOr<std::string> Reducer::NonFiniteOrigin() {
  std::vector<std::string> names;
  for (size_t index : stats_.nonfinite) names.push_back(params_[index].name);
  return GatherNonFiniteOrigin(*impl_->group(), names);
}

}  // namespace ddprun::ddp
