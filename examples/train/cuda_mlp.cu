#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "examples/train/cuda_kernels.hpp"
#include "examples/train/cuda_mlp.hpp"
#include "examples/train/data.hpp"

namespace ddprun::train {
namespace {

constexpr float kRunningMeanMomentum = 0.1f;  // as mlp.cpp

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
template <typename T>
using DeviceArray = std::unique_ptr<T, CudaFree>;

struct CublasDestroy {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};
using CublasHandle = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDestroy>;

Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(what + ": " + cudaGetErrorString(err));
}

Status CublasStatus(cublasStatus_t st, const std::string& what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(what + ": " + cublasGetStatusString(st));
}

template <typename T>
StatusOr<DeviceArray<T>> Allocate(size_t n) {
  void* p = nullptr;
  const size_t bytes = (n == 0 ? 1 : n) * sizeof(T);
  if (Status s =
          CudaStatus(cudaMalloc(&p, bytes), "cudaMalloc " + std::to_string(bytes) + " bytes");
      !s.ok()) {
    return s;
  }
  return DeviceArray<T>(static_cast<T*>(p));
}

}  // namespace

class CudaMlp::Impl {
 public:
  struct Layer {
    int in = 0;
    int out = 0;
    DeviceArray<float> weight, bias, weight_grad, bias_grad;
  };

  Status Init(Mlp& host);
  void Forward(const float* x, const float* y, int batch);
  float Loss();
  void Backward(float loss_scale, const std::function<void(size_t)>& on_ready);
  double Checksum();
  void Check(cudaError_t err, const char* what);
  void Check(cublasStatus_t st, const char* what);

  std::vector<ddp::Parameter> params_;
  std::vector<Layer> layers_;
  size_t used_layers_ = 0;
  DeviceArray<float> running_mean_;
  Status error_;

 private:
  Status Activations(int batch);
  void LayerForward(size_t l);
  void LayerBackward(size_t l, const std::function<void(size_t)>& on_ready);
  // Row-major C (m x n) = op(A) (m x k) * op(B) (k x n), through the
  // column-major identity C^T = op(B)^T * op(A)^T.
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
            const float* b, int ldb, float* c, int ldc);

  CublasHandle cublas_;
  int batch_ = 0;
  std::vector<DeviceArray<float>> inputs_, z_;  // per used layer, as mlp.hpp
  DeviceArray<float> targets_, delta_, next_delta_;
  DeviceArray<double> loss_;
};

void CudaMlp::Impl::Check(cudaError_t err, const char* what) {
  if (error_.ok()) (void)(error_ = CudaStatus(err, what));
}

void CudaMlp::Impl::Check(cublasStatus_t st, const char* what) {
  if (error_.ok()) (void)(error_ = CublasStatus(st, what));
}

Status CudaMlp::Impl::Init(Mlp& host) {
  cublasHandle_t h = nullptr;
  if (Status s = CublasStatus(cublasCreate(&h), "cublasCreate"); !s.ok()) return s;
  cublas_.reset(h);
  // Plain fp32 GEMMs: the checksum must match the CPU reference.
  if (Status s = CublasStatus(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
      !s.ok()) {
    return s;
  }
  std::vector<ddp::Parameter>& hp = host.parameters();
  for (size_t i = 0; i + 1 < hp.size(); i += 2) {
    Layer layer;
    layer.out = static_cast<int>(hp[i].shape[0]);
    layer.in = static_cast<int>(hp[i].shape[1]);
    DeviceArray<float>* arrays[] = {&layer.weight, &layer.weight_grad, &layer.bias,
                                    &layer.bias_grad};
    for (int a = 0; a < 4; ++a) {
      const ddp::Parameter& p = hp[i + a / 2];
      StatusOr<DeviceArray<float>> d = Allocate<float>(p.numel());
      if (!d.ok()) return d.status().Annotate("parameter " + p.name);
      *arrays[a] = std::move(*d);
      const float* src = a % 2 == 0 ? p.data : p.grad;
      Status s = CudaStatus(
          cudaMemcpy(arrays[a]->get(), src, p.numel() * sizeof(float), cudaMemcpyHostToDevice),
          "copy parameter " + p.name + " to the device");
      if (!s.ok()) return s;
    }
    params_.push_back({hp[i].name, hp[i].shape, layer.weight.get(), layer.weight_grad.get()});
    params_.push_back({hp[i + 1].name, hp[i + 1].shape, layer.bias.get(), layer.bias_grad.get()});
    if (hp[i].name.rfind("layers.", 0) == 0) ++used_layers_;
    layers_.push_back(std::move(layer));
  }
  StatusOr<DeviceArray<float>> mean = Allocate<float>(kInputDim);
  if (!mean.ok()) return mean.status();
  running_mean_ = std::move(*mean);
  StatusOr<DeviceArray<double>> loss = Allocate<double>(1);
  if (!loss.ok()) return loss.status();
  loss_ = std::move(*loss);
  return CudaStatus(cudaMemset(running_mean_.get(), 0, kInputDim * sizeof(float)),
                    "zero running_mean");
}

// The activations are sized for the first batch; a different batch size
// reallocates them.
Status CudaMlp::Impl::Activations(int batch) {
  if (batch == batch_) return Status::Ok();
  inputs_.clear();
  z_.clear();
  int widest = kInputDim;
  for (size_t l = 0; l < used_layers_; ++l) {
    StatusOr<DeviceArray<float>> in = Allocate<float>(static_cast<size_t>(batch) * layers_[l].in);
    StatusOr<DeviceArray<float>> z = Allocate<float>(static_cast<size_t>(batch) * layers_[l].out);
    if (!in.ok()) return in.status();
    if (!z.ok()) return z.status();
    inputs_.push_back(std::move(*in));
    z_.push_back(std::move(*z));
    widest = std::max({widest, layers_[l].in, layers_[l].out});
  }
  for (DeviceArray<float>* a : {&targets_, &delta_, &next_delta_}) {
    StatusOr<DeviceArray<float>> d = Allocate<float>(static_cast<size_t>(batch) * widest);
    if (!d.ok()) return d.status();
    *a = std::move(*d);
  }
  batch_ = batch;
  return Status::Ok();
}

void CudaMlp::Impl::Gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                         const float* b, int ldb, float* c, int ldc) {
  const float one = 1.0f;
  const float zero = 0.0f;
  Check(cublasSgemm(cublas_.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, ldb, a, lda, &zero, c,
                    ldc),
        "cublasSgemm");
}

void CudaMlp::Impl::Forward(const float* x, const float* y, int batch) {
  if (Status s = Activations(batch); !s.ok()) {
    if (error_.ok()) (void)(error_ = s.Annotate("allocate activations"));
    return;
  }
  const size_t x_bytes = static_cast<size_t>(batch) * kInputDim * sizeof(float);
  Check(cudaMemcpy(inputs_[0].get(), x, x_bytes, cudaMemcpyHostToDevice), "copy the batch");
  Check(cudaMemcpy(targets_.get(), y, batch * sizeof(float), cudaMemcpyHostToDevice),
        "copy the targets");
  Check(cuda::UpdateRunningMean(inputs_[0].get(), running_mean_.get(), batch, kInputDim,
                                kRunningMeanMomentum),
        "running mean kernel");
  for (size_t l = 0; l < used_layers_; ++l) LayerForward(l);
  Check(cuda::MseLoss(z_[used_layers_ - 1].get(), targets_.get(), batch, loss_.get()),
        "loss kernel");
}

// z = input * W^T + b; the next layer's input is relu(z).
void CudaMlp::Impl::LayerForward(size_t l) {
  const Layer& layer = layers_[l];
  Gemm(false, true, batch_, layer.out, layer.in, inputs_[l].get(), layer.in, layer.weight.get(),
       layer.in, z_[l].get(), layer.out);
  Check(cuda::AddBias(z_[l].get(), layer.bias.get(), batch_, layer.out), "bias kernel");
  if (l + 1 < used_layers_) {
    Check(cuda::Relu(z_[l].get(), inputs_[l + 1].get(), static_cast<size_t>(batch_) * layer.out),
          "relu kernel");
  }
}

float CudaMlp::Impl::Loss() {
  double loss = NAN;
  Check(cudaMemcpy(&loss, loss_.get(), sizeof(double), cudaMemcpyDeviceToHost), "copy the loss");
  return static_cast<float>(loss);
}

void CudaMlp::Impl::Backward(float loss_scale, const std::function<void(size_t)>& on_ready) {
  if (batch_ == 0) return;  // Forward failed; error_ says why
  Check(cuda::MseGrad(z_[used_layers_ - 1].get(), targets_.get(), batch_, loss_scale, delta_.get()),
        "loss gradient kernel");
  for (size_t l = used_layers_; l-- > 0;) LayerBackward(l, on_ready);
}

// As mlp.cpp: dW = delta^T * input, db = column sums of delta, then the
// previous layer's delta = (delta * W) where its z > 0.
void CudaMlp::Impl::LayerBackward(size_t l, const std::function<void(size_t)>& on_ready) {
  Layer& layer = layers_[l];
  Gemm(true, false, layer.out, layer.in, batch_, delta_.get(), layer.out, inputs_[l].get(),
       layer.in, layer.weight_grad.get(), layer.in);
  Check(cuda::ColumnSums(delta_.get(), layer.bias_grad.get(), batch_, layer.out),
        "bias gradient kernel");
  on_ready(2 * l);
  on_ready(2 * l + 1);
  if (l == 0) return;
  Gemm(false, false, batch_, layer.in, layer.out, delta_.get(), layer.out, layer.weight.get(),
       layer.in, next_delta_.get(), layer.in);
  Check(cuda::ReluBackward(z_[l - 1].get(), next_delta_.get(),
                           static_cast<size_t>(batch_) * layer.in),
        "relu backward kernel");
  delta_.swap(next_delta_);
}

double CudaMlp::Impl::Checksum() {
  double sum = 0;
  uint64_t k = 0;
  std::vector<float> host;
  for (const ddp::Parameter& p : params_) {
    host.resize(p.numel());
    Check(cudaMemcpy(host.data(), p.data, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
          "copy parameters to the host");
    for (size_t i = 0; i < host.size(); ++i, ++k) sum += static_cast<double>(host[i]) * (1 + k % 7);
  }
  return sum;
}

CudaMlp::CudaMlp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaMlp::~CudaMlp() = default;

StatusOr<std::unique_ptr<CudaMlp>> CudaMlp::Create(const MlpConfig& config) {
  Mlp host(config);  // the initial values, generated exactly as on the CPU
  auto impl = std::make_unique<Impl>();
  if (Status s = impl->Init(host); !s.ok()) return s.Annotate("build the model on the device");
  return std::make_unique<CudaMlp>(std::move(impl));
}

float CudaMlp::Forward(const float* x, const float* y, int batch) {
  impl_->Forward(x, y, batch);
  return impl_->Loss();
}

void CudaMlp::Backward(float loss_scale, const std::function<void(size_t)>& on_ready) {
  impl_->Backward(loss_scale, on_ready);
}

std::vector<ddp::Parameter>& CudaMlp::parameters() { return impl_->params_; }

std::vector<ddp::Buffer> CudaMlp::buffers() {
  return {{"running_mean", {kInputDim}, impl_->running_mean_.get()}};
}

long CudaMlp::IndexOf(const char* name) const {
  for (size_t i = 0; i < impl_->params_.size(); ++i) {
    if (impl_->params_[i].name == name) return static_cast<long>(i);
  }
  return -1;
}

void CudaMlp::ZeroGrads() {
  for (const ddp::Parameter& p : impl_->params_) {
    impl_->Check(cudaMemsetAsync(p.grad, 0, p.numel() * sizeof(float), nullptr), "zero gradients");
  }
}

void CudaMlp::SetGradNan(size_t index) {
  const float nan = NAN;
  impl_->Check(cudaMemcpy(impl_->params_[index].grad, &nan, sizeof(float), cudaMemcpyHostToDevice),
               "inject NaN");
}

double CudaMlp::Checksum() { return impl_->Checksum(); }

Status CudaMlp::TakeError() {
  impl_->Check(cudaGetLastError(), "CUDA");
  return std::exchange(impl_->error_, Status::Ok());
}

}  // namespace ddprun::train
