#include "ddp/grad_scaler.hpp"

#include <cmath>
#include <cstring>
#include <memory>

#ifdef DDPRUN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "ddp/cuda/unscale.hpp"
#endif

namespace ddprun::ddp {
namespace {

constexpr size_t kAnomalyNames = 3;

// Gradients live on the device exactly when the group is NCCL's.
bool OnCuda(const ProcessGroup* group) {
  return group != nullptr && std::strcmp(group->backend(), "nccl") == 0;
}

bool Distributed(const ProcessGroup* group) { return group != nullptr && group->size() > 1; }

// Multiplies by `inv_scale` and checks in the same loop; returns the indices
// of the parameters whose gradient had an inf or NaN.
std::vector<size_t> UnscaleOnHost(std::vector<Parameter>& params, float inv_scale) {
  std::vector<size_t> bad;
  for (size_t p = 0; p < params.size(); ++p) {
    float* g = params[p].grad;
    bool finite = true;
    for (size_t i = 0, n = params[p].numel(); i < n; ++i) {
      finite &= std::isfinite(g[i]);
      g[i] *= inv_scale;
    }
    if (!finite) bad.push_back(p);
  }
  return bad;
}

double SumOfSquaresOnHost(const std::vector<Parameter>& params) {
  double sum = 0;
  for (const Parameter& p : params) {
    for (size_t i = 0, n = p.numel(); i < n; ++i) sum += static_cast<double>(p.grad[i]) * p.grad[i];
  }
  return sum;
}

void ScaleOnHost(std::vector<Parameter>& params, float factor) {
  for (Parameter& p : params) {
    for (size_t i = 0, n = p.numel(); i < n; ++i) p.grad[i] *= factor;
  }
}

#ifdef DDPRUN_HAVE_CUDA
struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
template <typename T>
using DeviceBuffer = std::unique_ptr<T, CudaFree>;

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

template <typename T>
StatusOr<DeviceBuffer<T>> DeviceZeros(size_t n) {
  void* p = nullptr;
  if (Status s = CudaStatus(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc"); !s.ok()) return s;
  DeviceBuffer<T> buffer(static_cast<T*>(p));
  if (Status s = CudaStatus(cudaMemset(p, 0, n * sizeof(T)), "cudaMemset"); !s.ok()) return s;
  return buffer;
}

// One flag per parameter so that anomaly mode can name them; kernels run on
// the legacy default stream, which the NCCL group's stream waits for.
StatusOr<std::vector<size_t>> UnscaleOnDevice(std::vector<Parameter>& params, float inv_scale) {
  auto flags = DeviceZeros<float>(params.size() + 1);
  if (!flags.ok()) return flags.status();
  for (size_t p = 0; p < params.size(); ++p) {
    cudaError_t err =
        UnscaleAndCheck(params[p].grad, params[p].numel(), inv_scale, flags->get() + p, nullptr);
    if (Status s = CudaStatus(err, "unscale kernel"); !s.ok()) return s;
  }
  std::vector<float> host(params.size());
  cudaError_t err =
      cudaMemcpy(host.data(), flags->get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  if (Status s = CudaStatus(err, "copy found_inf flags"); !s.ok()) return s;
  std::vector<size_t> bad;
  for (size_t p = 0; p < host.size(); ++p) {
    if (host[p] != 0) bad.push_back(p);
  }
  return bad;
}

StatusOr<double> SumOfSquaresOnDevice(const std::vector<Parameter>& params) {
  auto sum = DeviceZeros<double>(1);
  if (!sum.ok()) return sum.status();
  for (const Parameter& p : params) {
    cudaError_t err = AddSumOfSquares(p.grad, p.numel(), sum->get(), nullptr);
    if (Status s = CudaStatus(err, "norm kernel"); !s.ok()) return s;
  }
  double host = 0;
  cudaError_t err = cudaMemcpy(&host, sum->get(), sizeof(double), cudaMemcpyDeviceToHost);
  if (Status s = CudaStatus(err, "copy norm"); !s.ok()) return s;
  return host;
}

Status ScaleOnDevice(std::vector<Parameter>& params, float factor) {
  for (Parameter& p : params) {
    if (Status s = CudaStatus(ScaleInPlace(p.grad, p.numel(), factor, nullptr), "clip kernel");
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

// NCCL reduces device memory only: the value makes a round trip.
StatusOr<float> AllReduceOnDevice(ProcessGroup* group, float value, ReduceOp op) {
  auto d = DeviceZeros<float>(1);
  if (!d.ok()) return d.status();
  cudaError_t err = cudaMemcpy(d->get(), &value, sizeof(float), cudaMemcpyHostToDevice);
  if (Status s = CudaStatus(err, "copy to device"); !s.ok()) return s;
  if (Status s = group->AllReduce(View(d->get(), 1, Device::kCuda), op)->Wait(); !s.ok()) return s;
  err = cudaMemcpy(&value, d->get(), sizeof(float), cudaMemcpyDeviceToHost);
  if (Status s = CudaStatus(err, "copy from device"); !s.ok()) return s;
  return value;
}
#else
Status NoCuda() {
  return Unavailable(
      "the process group is nccl but ddprun was built without CUDA: rebuild "
      "where cmake finds CUDA and NCCL");
}
#endif

// The same value on every rank: `value` reduced with `op` across the group.
StatusOr<float> AllReduceScalar(ProcessGroup* group, float value, ReduceOp op) {
  if (!Distributed(group)) return value;
  if (OnCuda(group)) {
#ifdef DDPRUN_HAVE_CUDA
    return AllReduceOnDevice(group, value, op);
#else
    return NoCuda();
#endif
  }
  if (Status s = group->AllReduce(View(&value, 1), op)->Wait(); !s.ok()) return s;
  return value;
}

std::string AnomalyReport(const std::vector<Parameter>& params, const std::vector<size_t>& bad,
                          long step) {
  std::string report = "step " + std::to_string(step) + ": non-finite gradients ";
  if (bad.empty()) return report + "on another rank (none here)";
  report += "in ";
  for (size_t i = 0; i < bad.size() && i < kAnomalyNames; ++i) {
    report += (i == 0 ? "" : ", ") + params[bad[i]].name;
  }
  if (bad.size() > kAnomalyNames)
    report += " and " + std::to_string(bad.size() - kAnomalyNames) + " more";
  return report;
}

// Unscaling and clipping read float32 gradients (fp32 master parameters, as
// autocast keeps them).
Status RequireFloat32(const std::vector<Parameter>& params, const char* what) {
  for (const Parameter& p : params) {
    if (p.dtype == DType::kFloat32) continue;
    return Unimplemented(std::string("grad scaler: ") + what + ": parameter " + p.name + " has " +
                         DTypeName(p.dtype) +
                         " gradients: 16-bit gradients are not supported yet here; keep the "
                         "parameters in float32 and compute in 16 bits (autocast, train --amp)");
  }
  return Status::Ok();
}

}  // namespace

GradScaler::GradScaler(ProcessGroup* group, GradScalerOptions options)
    : group_(group), options_(options), scale_(options.init_scale) {}

Status GradScaler::Unscale(std::vector<Parameter>& params, long step) {
  if (unscaled_) {
    return InvalidArgument(
        "grad scaler: unscale called twice since the last update: call "
        "Update() once per step, after the optimizer step");
  }
  if (Status s = RequireFloat32(params, "unscale"); !s.ok()) return s;
  // As PyTorch: the reciprocal in double, since float division can be inexact.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  std::vector<size_t> bad;
  if (OnCuda(group_)) {
#ifdef DDPRUN_HAVE_CUDA
    auto found = UnscaleOnDevice(params, inv_scale);
    if (!found.ok()) return found.status().Annotate("grad scaler: unscale");
    bad = std::move(*found);
#else
    return NoCuda();
#endif
  } else {
    bad = UnscaleOnHost(params, inv_scale);
  }
  unscaled_ = true;
  auto agreed = AllReduceScalar(group_, bad.empty() ? 0.0f : 1.0f, ReduceOp::kMax);
  if (!agreed.ok()) return agreed.status().Annotate("grad scaler: agree on found_inf");
  found_inf_ = *agreed != 0;
  anomaly_.clear();
  if (options_.anomaly_mode && found_inf_) anomaly_ = AnomalyReport(params, bad, step);
  return Status::Ok();
}

StatusOr<float> GradScaler::ClipGradNorm(std::vector<Parameter>& params, float max_norm) {
  if (!unscaled_) {
    return InvalidArgument(
        "grad scaler: clip_grad_norm before unscale would clip the scaled "
        "gradients: call Unscale() first");
  }
  if (Status s = RequireFloat32(params, "clip_grad_norm"); !s.ok()) return s;
  const bool on_cuda = OnCuda(group_);
  double local = 0;
  if (on_cuda) {
#ifdef DDPRUN_HAVE_CUDA
    auto sum = SumOfSquaresOnDevice(params);
    if (!sum.ok()) return sum.status().Annotate("grad scaler: clip_grad_norm");
    local = *sum;
#else
    return NoCuda();
#endif
  } else {
    local = SumOfSquaresOnHost(params);
  }
  // After the reducer's all-reduce every rank holds the same averaged
  // gradients, so the local norm is the global one: summing it across ranks
  // would overstate it by sqrt(world size) (and cost a collective).
  const float norm = static_cast<float>(std::sqrt(local));
  // PyTorch's clip_coef, clamped at 1 (a no-op when within the bound).
  const float coef = static_cast<float>(max_norm / (static_cast<double>(norm) + 1e-6));
  if (coef < 1.0f) {
#ifdef DDPRUN_HAVE_CUDA
    if (on_cuda) {
      if (Status s = ScaleOnDevice(params, coef); !s.ok()) {
        return s.Annotate("grad scaler: clip_grad_norm");
      }
      return norm;
    }
#endif
    ScaleOnHost(params, coef);
  }
  return norm;
}

void GradScaler::Update() {
  unscaled_ = false;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  // Never grow past float's range to inf.
  const float grown = scale_ * options_.growth_factor;
  if (std::isfinite(grown)) scale_ = grown;
  growth_tracker_ = 0;
}

}  // namespace ddprun::ddp
