#include "examples/train/optimizer.hpp"

#include <cmath>

namespace ddprun::train {
namespace {

class Sgd : public Optimizer {
 public:
  explicit Sgd(float lr) : lr_(lr) {}

  void Step(std::vector<ddp::Parameter>& params) override {
    for (ddp::Parameter& p : params) {
      const size_t n = p.numel();
      float* __restrict data = p.data;
      const float* __restrict grad = p.grad;
      for (size_t i = 0; i < n; ++i) data[i] -= lr_ * grad[i];
    }
  }

 private:
  float lr_;
};

class Adam : public Optimizer {
 public:
  Adam(float lr, const std::vector<ddp::Parameter>& params) : lr_(lr) {
    for (const ddp::Parameter& p : params) {
      m_.emplace_back(p.numel(), 0.0f);
      v_.emplace_back(p.numel(), 0.0f);
    }
  }

  void Step(std::vector<ddp::Parameter>& params) override {
    ++step_;
    const float correction1 = 1.0f - std::pow(kBeta1, static_cast<float>(step_));
    const float correction2 = 1.0f - std::pow(kBeta2, static_cast<float>(step_));
    const float step_size = lr_ / correction1;
    const float sqrt_correction2 = std::sqrt(correction2);
    for (size_t k = 0; k < params.size(); ++k) {
      float* __restrict data = params[k].data;
      const float* __restrict grad = params[k].grad;
      float* __restrict m = m_[k].data();
      float* __restrict v = v_[k].data();
      const size_t n = m_[k].size();
      for (size_t i = 0; i < n; ++i) {
        const float g = grad[i];
        m[i] = kBeta1 * m[i] + (1.0f - kBeta1) * g;
        v[i] = kBeta2 * v[i] + (1.0f - kBeta2) * g * g;
        data[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_correction2 + kEps);
      }
    }
  }

 private:
  static constexpr float kBeta1 = 0.9f;
  static constexpr float kBeta2 = 0.999f;
  static constexpr float kEps = 1e-8f;
  float lr_;
  long step_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(OptimizerKind kind, float lr,
                                         const std::vector<ddp::Parameter>& params) {
  if (kind == OptimizerKind::kAdam) return std::make_unique<Adam>(lr, params);
  return std::make_unique<Sgd>(lr);
}

}  // namespace ddprun::train
