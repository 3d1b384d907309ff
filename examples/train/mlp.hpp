// The trainer's model: an MLP kInputDim -> width (x depth, ReLU) -> 1 with an
// MSE loss, forward and backward by hand on CBLAS (row-major), fp32 master
// weights. With a reduced Precision it rounds the weights (a copy per
// forward), activations and backpropagated deltas through fp16/bf16, as
// autocast would; weight gradients stay fp32.
//
// Parameters are "layers.<l>.weight" {out, in} and "layers.<l>.bias" {out},
// in layer order (index 2l and 2l+1), then "unused.weight"/"unused.bias"
// when asked for: registered, never used by forward, so never given a
// gradient. One buffer, "running_mean" {kInputDim}, is the running mean of
// the inputs, updated in place by every Forward.
//
// The ddp::Parameter/Buffer values point into this object's storage, valid
// for its lifetime; the object is neither copyable nor movable. Not
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.hpp"
#include "ddp/reducer.hpp"
#include "examples/train/options.hpp"

namespace ddprun::train {

struct MlpConfig {
  int width = 256;
  int depth = 3;
  bool unused_layer = false;
  Precision precision = Precision::kFloat32;
  uint64_t seed = 1;
};

class Mlp {
 public:
  explicit Mlp(const MlpConfig& config);
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  // Runs `batch` rows of `x` (batch x kInputDim) against `y`; keeps what
  // Backward needs. Updates running_mean.
  void Forward(const float* x, const float* y, int batch);
  // The last Forward's mean squared error (CudaMlp: waits for the device).
  float Loss() const { return loss_; }

  // Backpropagates the last Forward's loss times `loss_scale`, last layer
  // first, overwriting each used parameter's gradient (where parameters()[i]
  // .grad points) and calling on_ready(index) as soon as that gradient is
  // final.
  void Backward(float loss_scale, const std::function<void(size_t)>& on_ready);

  std::vector<ddp::Parameter>& parameters() { return params_; }
  std::vector<ddp::Buffer> buffers();
  // The index of the parameter called `name`, or -1.
  long IndexOf(const char* name) const;
  // Zeroes the gradients Backward does not write (the unused layer's):
  // Backward overwrites every other one.
  void ZeroGrads();
  // Writes the gradients where `params` (the same parameters, e.g. the
  // reducer's, with gradient_as_bucket_view) point from now on.
  void UseGradStorage(const std::vector<ddp::Parameter>& params);
  // Sets element 0 of parameter `index`'s gradient to NaN.
  void SetGradNan(size_t index);
  // Always Ok: the CPU model cannot fail (CudaMlp's interface, for the
  // training loop shared by both).
  Status TakeError() { return Status::Ok(); }

  // Sum over every parameter element k (flat, registration order) of
  // value * (1 + k % 7), accumulated in double.
  double Checksum() const;

 private:
  struct Layer {
    int in = 0;
    int out = 0;
    std::vector<float> weight, bias, weight_grad, bias_grad;
  };
  void AddLayer(int in, int out);
  void LayerForward(size_t l, int batch);
  // Layer l's weights as this forward multiplies them (rounded to the precision).
  const float* Weight(size_t l);
  void LayerBackward(size_t l, int batch, const std::function<void(size_t)>& on_ready);

  MlpConfig config_;
  std::vector<Layer> layers_;  // the used layers, then the unused one
  size_t used_layers_ = 0;
  std::vector<ddp::Parameter> params_;
  std::vector<float> running_mean_;

  // Per Forward: inputs_[l] is layer l's input, z_[l] its output before ReLU;
  // delta_ is dLoss/dz of the layer being backpropagated.
  int batch_ = 0;
  float loss_ = 0;
  std::vector<std::vector<float>> inputs_, z_;
  std::vector<std::vector<float>> rounded_weights_;  // with a reduced precision
  std::vector<float> targets_, delta_, next_delta_;
};

}  // namespace ddprun::train
