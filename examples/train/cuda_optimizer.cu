#include <cuda_runtime_api.h>

#include <cmath>
#include <string>
#include <utility>

#include "examples/train/cuda_kernels.hpp"
#include "examples/train/cuda_optimizer.hpp"

namespace ddprun::train {
namespace {

struct CudaFree {
  void operator()(float* p) const { cudaFree(p); }
};
using DeviceFloats = std::unique_ptr<float, CudaFree>;

class CudaOptimizer : public Optimizer {
 public:
  explicit CudaOptimizer(HalfWeights half) : half_(std::move(half)) {}
  Status TakeError() override { return std::exchange(error_, Status::Ok()); }

 protected:
  // Parameter k's 16-bit copy, written with its update (none where not kept).
  cuda::HalfCopy CopyOf(size_t k) const {
    if (k >= half_.copies.size()) return {};
    return {half_.precision, half_.copies[k]};
  }
  void Check(cudaError_t err, const char* what) {
    if (err != cudaSuccess && error_.ok()) {
      (void)(error_ = Internal(std::string(what) + ": " + cudaGetErrorString(err)));
    }
  }

 private:
  HalfWeights half_;
  Status error_;
};

class CudaSgd : public CudaOptimizer {
 public:
  CudaSgd(float lr, HalfWeights half) : CudaOptimizer(std::move(half)), lr_(lr) {}

  void Step(std::vector<ddp::Parameter>& params) override {
    for (size_t k = 0; k < params.size(); ++k) {
      ddp::Parameter& p = params[k];
      Check(cuda::SgdStep(p.data, p.grad, p.numel(), lr_, CopyOf(k)), "sgd");
    }
  }

 private:
  float lr_;
};

class CudaAdam : public CudaOptimizer {
 public:
  CudaAdam(float lr, HalfWeights half) : CudaOptimizer(std::move(half)), lr_(lr) {}

  Status Init(const std::vector<ddp::Parameter>& params) {
    for (const ddp::Parameter& p : params) {
      for (std::vector<DeviceFloats>* moments : {&m_, &v_}) {
        void* d = nullptr;
        const size_t bytes = (p.numel() == 0 ? 1 : p.numel()) * sizeof(float);
        cudaError_t err = cudaMalloc(&d, bytes);
        if (err == cudaSuccess) err = cudaMemset(d, 0, bytes);
        if (d != nullptr) moments->emplace_back(static_cast<float*>(d));
        if (err != cudaSuccess) {
          return Internal("adam state of " + p.name + ": " + cudaGetErrorString(err));
        }
      }
    }
    return Status::Ok();
  }

  // The scalars as optimizer.cpp computes them, on the host in float.
  void Step(std::vector<ddp::Parameter>& params) override {
    ++step_;
    const float correction1 = 1.0f - std::pow(kBeta1, static_cast<float>(step_));
    const float correction2 = 1.0f - std::pow(kBeta2, static_cast<float>(step_));
    const cuda::AdamStepArgs args{kBeta1, kBeta2, kEps, lr_ / correction1, std::sqrt(correction2)};
    for (size_t k = 0; k < params.size(); ++k) {
      ddp::Parameter& p = params[k];
      Check(cuda::AdamStep(p.data, p.grad, m_[k].get(), v_[k].get(), p.numel(), args, CopyOf(k)),
            "adam");
    }
  }

 private:
  static constexpr float kBeta1 = 0.9f;
  static constexpr float kBeta2 = 0.999f;
  static constexpr float kEps = 1e-8f;
  float lr_;
  long step_ = 0;
  std::vector<DeviceFloats> m_, v_;
};

}  // namespace

StatusOr<std::unique_ptr<Optimizer>> MakeCudaOptimizer(OptimizerKind kind, float lr,
                                                       const std::vector<ddp::Parameter>& params,
                                                       HalfWeights half) {
  if (kind == OptimizerKind::kSgd) {
    return std::unique_ptr<Optimizer>(std::make_unique<CudaSgd>(lr, std::move(half)));
  }
  auto adam = std::make_unique<CudaAdam>(lr, std::move(half));
  if (Status s = adam->Init(params); !s.ok()) return s.Annotate("allocate the optimizer state");
  return std::unique_ptr<Optimizer>(std::move(adam));
}

}  // namespace ddprun::train
