#include "examples/train/mlp.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "examples/train/data.hpp"
#include "examples/train/half.hpp"
#include "examples/train/random.hpp"

namespace ddprun::train {
namespace {

constexpr float kRunningMeanMomentum = 0.1f;

// PyTorch's nn.Linear default: uniform in +-1/sqrt(fan_in).
void InitUniform(uint64_t seed, size_t param_index, int fan_in, std::vector<float>* values) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  for (size_t k = 0; k < values->size(); ++k) {
    (*values)[k] = bound * UniformAt(seed, kParameterStream + param_index, k);
  }
}

}  // namespace

Mlp::Mlp(const MlpConfig& config) : config_(config), running_mean_(kInputDim, 0.0f) {
  int in = kInputDim;
  for (int l = 0; l < config.depth; ++l) {
    AddLayer(in, config.width);
    in = config.width;
  }
  AddLayer(in, 1);
  used_layers_ = layers_.size();
  if (config.unused_layer) AddLayer(config.width, config.width);
  // layers_ is complete: the pointers below stay valid.
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    const std::string prefix =
        l < used_layers_ ? "layers." + std::to_string(l) + "." : std::string("unused.");
    params_.push_back(
        {prefix + "weight", {layer.out, layer.in}, layer.weight.data(), layer.weight_grad.data()});
    params_.push_back({prefix + "bias", {layer.out}, layer.bias.data(), layer.bias_grad.data()});
  }
}

void Mlp::AddLayer(int in, int out) {
  Layer layer;
  layer.in = in;
  layer.out = out;
  layer.weight.resize(static_cast<size_t>(out) * in);
  layer.bias.resize(out);
  layer.weight_grad.assign(layer.weight.size(), 0.0f);
  layer.bias_grad.assign(out, 0.0f);
  const size_t index = 2 * layers_.size();
  InitUniform(config_.seed, index, in, &layer.weight);
  InitUniform(config_.seed, index + 1, in, &layer.bias);
  layers_.push_back(std::move(layer));
}

void Mlp::Forward(const float* x, const float* y, int batch) {
  batch_ = batch;
  inputs_.resize(used_layers_);
  z_.resize(used_layers_);
  inputs_[0].assign(x, x + static_cast<size_t>(batch) * kInputDim);
  RoundThrough(config_.precision, inputs_[0].data(), inputs_[0].size());
  for (int d = 0; d < kInputDim; ++d) {
    float sum = 0;
    for (int j = 0; j < batch; ++j) sum += x[j * kInputDim + d];
    running_mean_[d] += kRunningMeanMomentum * (sum / batch - running_mean_[d]);
  }
  for (size_t l = 0; l < used_layers_; ++l) LayerForward(l, batch);
  targets_.assign(y, y + batch);
  const std::vector<float>& out = z_[used_layers_ - 1];
  double loss = 0;
  for (int j = 0; j < batch; ++j) loss += (out[j] - y[j]) * (out[j] - y[j]);
  loss_ = static_cast<float>(loss / batch);
}

// z = input * W^T + b, rounded; the next layer's input is relu(z). With a
// reduced precision the product uses W rounded to it, as autocast casts the
// weights; backward's delta * W uses the same rounded copy.
void Mlp::LayerForward(size_t l, int batch) {
  const Layer& layer = layers_[l];
  const float* weight = Weight(l);
  std::vector<float>& z = z_[l];
  z.resize(static_cast<size_t>(batch) * layer.out);
  for (int j = 0; j < batch; ++j) {
    std::copy(layer.bias.begin(), layer.bias.end(), z.begin() + static_cast<size_t>(j) * layer.out);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, layer.out, layer.in, 1.0f,
              inputs_[l].data(), layer.in, weight, layer.in, 1.0f, z.data(), layer.out);
  RoundThrough(config_.precision, z.data(), z.size());
  if (l + 1 < used_layers_) {
    inputs_[l + 1].resize(z.size());
    const float* __restrict in = z.data();
    float* __restrict relu = inputs_[l + 1].data();
    for (size_t k = 0; k < z.size(); ++k) relu[k] = in[k] > 0 ? in[k] : 0.0f;
  }
}

const float* Mlp::Weight(size_t l) {
  const std::vector<float>& weight = layers_[l].weight;
  if (config_.precision == Precision::kFloat32) return weight.data();
  rounded_weights_.resize(used_layers_);
  rounded_weights_[l] = weight;
  RoundThrough(config_.precision, rounded_weights_[l].data(), weight.size());
  return rounded_weights_[l].data();
}

void Mlp::Backward(float loss_scale, const std::function<void(size_t)>& on_ready) {
  const std::vector<float>& out = z_[used_layers_ - 1];
  delta_.resize(batch_);
  for (int j = 0; j < batch_; ++j) {
    delta_[j] = loss_scale * 2.0f * (out[j] - targets_[j]) / static_cast<float>(batch_);
  }
  RoundThrough(config_.precision, delta_.data(), delta_.size());
  for (size_t l = used_layers_; l-- > 0;) LayerBackward(l, batch_, on_ready);
}

// With delta = dLoss/dz (batch x out): dW = delta^T * input, db = column sums
// of delta; then the previous layer's delta = (delta * W) where its z > 0.
// The gradients go where params_ points (the reducer's buckets, or the layer's own).
void Mlp::LayerBackward(size_t l, int batch, const std::function<void(size_t)>& on_ready) {
  const Layer& layer = layers_[l];
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, layer.out, layer.in, batch, 1.0f,
              delta_.data(), layer.out, inputs_[l].data(), layer.in, 0.0f, params_[2 * l].grad,
              layer.in);
  float* __restrict bias_grad = params_[2 * l + 1].grad;
  const float* __restrict delta = delta_.data();
  std::fill(bias_grad, bias_grad + layer.out, 0.0f);
  for (int j = 0; j < batch; ++j) {
    for (int o = 0; o < layer.out; ++o) bias_grad[o] += delta[j * layer.out + o];
  }
  on_ready(2 * l);
  on_ready(2 * l + 1);
  if (l == 0) return;
  next_delta_.resize(static_cast<size_t>(batch) * layer.in);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, layer.in, layer.out, 1.0f,
              delta_.data(), layer.out,
              rounded_weights_.empty() ? layer.weight.data() : rounded_weights_[l].data(), layer.in,
              0.0f, next_delta_.data(), layer.in);
  const float* __restrict z_prev = z_[l - 1].data();
  float* __restrict next = next_delta_.data();
  for (size_t k = 0; k < next_delta_.size(); ++k) next[k] = z_prev[k] > 0 ? next[k] : 0.0f;
  RoundThrough(config_.precision, next_delta_.data(), next_delta_.size());
  delta_.swap(next_delta_);
}

std::vector<ddp::Buffer> Mlp::buffers() {
  return {{"running_mean", {kInputDim}, running_mean_.data()}};
}

long Mlp::IndexOf(const char* name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return static_cast<long>(i);
  }
  return -1;
}

void Mlp::ZeroGrads() {
  for (size_t i = 2 * used_layers_; i < params_.size(); ++i) {
    std::fill(params_[i].grad, params_[i].grad + params_[i].numel(), 0.0f);
  }
}

void Mlp::UseGradStorage(const std::vector<ddp::Parameter>& params) {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].grad = params[i].grad;
}

void Mlp::SetGradNan(size_t index) { params_[index].grad[0] = NAN; }

double Mlp::Checksum() const {
  double sum = 0;
  uint64_t k = 0;
  for (const ddp::Parameter& p : params_) {
    const size_t n = p.numel();
    for (size_t i = 0; i < n; ++i, ++k) sum += static_cast<double>(p.data[i]) * (1 + k % 7);
  }
  return sum;
}

}  // namespace ddprun::train
