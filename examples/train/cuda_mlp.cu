#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "examples/train/cuda_amp_kernels.hpp"
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

struct CudaFreeHost {
  void operator()(void* p) const { cudaFreeHost(p); }
};

struct EventDestroy {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;

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

  Status Init(Mlp& host, Precision precision);
  void Forward(const float* x, const float* y, int batch);
  float Loss();
  void ZeroGrads();
  void UseGradStorage(const std::vector<ddp::Parameter>& params);
  HalfWeights HandOverHalfWeights();
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
  bool amp() const { return precision_ != Precision::kFloat32; }
  Status Activations(int batch);
  Status HalfActivations(int batch, int widest);
  void Upload(const float* x, const float* y, int batch);
  void LayerForward(size_t l);
  void LayerBackward(size_t l, const std::function<void(size_t)>& on_ready);
  void LayerForwardAmp(size_t l);
  void LayerBackwardAmp(size_t l, const std::function<void(size_t)>& on_ready);
  // Row-major C (m x n) = op(A) (m x k) * op(B) (k x n), through the
  // column-major identity C^T = op(B)^T * op(A)^T.
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
            const float* b, int ldb, float* c, int ldc);
  // The same with 16-bit A and B (the precision's) and an fp32 C,
  // accumulated in fp32 on the tensor cores.
  void GemmHalf(bool trans_a, bool trans_b, int m, int n, int k, const uint16_t* a, int lda,
                const uint16_t* b, int ldb, float* c, int ldc);

  CublasHandle cublas_;
  int batch_ = 0;
  std::vector<DeviceArray<float>> inputs_, z_;  // per used layer, as mlp.hpp
  DeviceArray<float> targets_, delta_, next_delta_;
  DeviceArray<double> loss_;
  // The batch goes to the device through pinned memory, asynchronously;
  // uploaded_ fires when the device has read it (before it is reused).
  std::unique_ptr<float, CudaFreeHost> staging_;
  Event uploaded_;

  // --amp (cuda_amp_kernels.hpp): per used layer the 16-bit copies of its
  // weights and input as this forward multiplies them and of its rounded
  // output; the backpropagated delta; acc_, a GEMM's fp32 result before
  // rounding. inputs_[0] keeps the fp32 batch (for the running mean).
  Precision precision_ = Precision::kFloat32;
  std::vector<DeviceArray<uint16_t>> half_weight_, half_in_, half_z_;
  // Whether half_weight_ holds the weights as they are: cast by the first
  // forward, then (HandOverHalfWeights) kept by the optimizer's updates.
  bool half_weights_cast_ = false;
  bool half_weights_kept_ = false;
  DeviceArray<uint16_t> half_delta_, half_next_delta_;
  DeviceArray<float> acc_;
};

void CudaMlp::Impl::Check(cudaError_t err, const char* what) {
  if (error_.ok()) (void)(error_ = CudaStatus(err, what));
}

void CudaMlp::Impl::Check(cublasStatus_t st, const char* what) {
  if (error_.ok()) (void)(error_ = CublasStatus(st, what));
}

Status CudaMlp::Impl::Init(Mlp& host, Precision precision) {
  precision_ = precision;
  cublasHandle_t h = nullptr;
  if (Status s = CublasStatus(cublasCreate(&h), "cublasCreate"); !s.ok()) return s;
  cublas_.reset(h);
  // The default mode, as PyTorch with TF32 off: fp32 GEMMs in full fp32
  // (TF32 only where NVIDIA_TF32_OVERRIDE asks; the tests and benchmarks set
  // it to 0), 16-bit ones on the tensor cores with fp32 accumulation. (The
  // pedantic mode, which cuBLAS says may be slower, was used for fp32 before.)
  if (Status s = CublasStatus(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
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
    if (hp[i].name.rfind("layers.", 0) == 0) {
      ++used_layers_;
      if (amp()) {
        StatusOr<DeviceArray<uint16_t>> w = Allocate<uint16_t>(hp[i].numel());
        if (!w.ok()) return w.status().Annotate("16-bit copy of " + hp[i].name);
        half_weight_.push_back(std::move(*w));
      }
    }
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
    widest = std::max({widest, layers_[l].in, layers_[l].out});
    if (amp() && l > 0) continue;  // --amp: only the fp32 batch
    StatusOr<DeviceArray<float>> in = Allocate<float>(static_cast<size_t>(batch) * layers_[l].in);
    if (!in.ok()) return in.status();
    inputs_.push_back(std::move(*in));
    if (amp()) continue;
    StatusOr<DeviceArray<float>> z = Allocate<float>(static_cast<size_t>(batch) * layers_[l].out);
    if (!z.ok()) return z.status();
    z_.push_back(std::move(*z));
  }
  if (amp()) {
    if (Status s = HalfActivations(batch, widest); !s.ok()) return s;
  }
  for (DeviceArray<float>* a : {&targets_, &delta_, &next_delta_}) {
    if (amp() && a != &targets_) continue;
    StatusOr<DeviceArray<float>> d = Allocate<float>(static_cast<size_t>(batch) * widest);
    if (!d.ok()) return d.status();
    *a = std::move(*d);
  }
  // x and y, one after the other.
  const size_t staging_bytes = static_cast<size_t>(batch) * (kInputDim + 1) * sizeof(float);
  void* pinned = nullptr;
  if (uploaded_) {  // the old staging buffer may still be read
    Status s = CudaStatus(cudaEventSynchronize(uploaded_.get()), "wait for the last upload");
    if (!s.ok()) return s;
  }
  if (Status s = CudaStatus(cudaMallocHost(&pinned, staging_bytes),
                            "cudaMallocHost " + std::to_string(staging_bytes) + " bytes");
      !s.ok()) {
    return s;
  }
  staging_.reset(static_cast<float*>(pinned));
  if (!uploaded_) {
    cudaEvent_t event = nullptr;
    Status s =
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    if (!s.ok()) return s;
    uploaded_.reset(event);
  }
  batch_ = batch;
  return Status::Ok();
}

Status CudaMlp::Impl::HalfActivations(int batch, int widest) {
  half_in_.clear();
  half_z_.clear();
  const auto rows = static_cast<size_t>(batch);
  for (size_t l = 0; l < used_layers_; ++l) {
    StatusOr<DeviceArray<uint16_t>> in = Allocate<uint16_t>(rows * layers_[l].in);
    StatusOr<DeviceArray<uint16_t>> z = Allocate<uint16_t>(rows * layers_[l].out);
    if (!in.ok()) return in.status();
    if (!z.ok()) return z.status();
    half_in_.push_back(std::move(*in));
    half_z_.push_back(std::move(*z));
  }
  for (DeviceArray<uint16_t>* a : {&half_delta_, &half_next_delta_}) {
    StatusOr<DeviceArray<uint16_t>> d = Allocate<uint16_t>(rows * widest);
    if (!d.ok()) return d.status();
    *a = std::move(*d);
  }
  StatusOr<DeviceArray<float>> acc = Allocate<float>(rows * widest);
  if (!acc.ok()) return acc.status();
  acc_ = std::move(*acc);
  return Status::Ok();
}

// The batch to the device without waiting for it: the host waits only for
// the previous step's upload (long done) before refilling the staging buffer.
void CudaMlp::Impl::Upload(const float* x, const float* y, int batch) {
  const size_t nx = static_cast<size_t>(batch) * kInputDim;
  Check(cudaEventSynchronize(uploaded_.get()), "wait for the last upload");
  float* staging = staging_.get();
  std::copy(x, x + nx, staging);
  std::copy(y, y + batch, staging + nx);
  Check(cudaMemcpyAsync(inputs_[0].get(), staging, nx * sizeof(float), cudaMemcpyHostToDevice,
                        cudaStreamLegacy),
        "copy the batch");
  Check(cudaMemcpyAsync(targets_.get(), staging + nx, batch * sizeof(float), cudaMemcpyHostToDevice,
                        cudaStreamLegacy),
        "copy the targets");
  Check(cudaEventRecord(uploaded_.get(), cudaStreamLegacy), "record the upload");
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

void CudaMlp::Impl::GemmHalf(bool trans_a, bool trans_b, int m, int n, int k, const uint16_t* a,
                             int lda, const uint16_t* b, int ldb, float* c, int ldc) {
  const float one = 1.0f;
  const float zero = 0.0f;
  const cudaDataType half = precision_ == Precision::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  Check(cublasGemmEx(cublas_.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, half, ldb, a, half, lda,
                     &zero, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void CudaMlp::Impl::Forward(const float* x, const float* y, int batch) {
  if (Status s = Activations(batch); !s.ok()) {
    if (error_.ok()) (void)(error_ = s.Annotate("allocate activations"));
    return;
  }
  Upload(x, y, batch);
  Check(cuda::UpdateRunningMean(inputs_[0].get(), running_mean_.get(), batch, kInputDim,
                                kRunningMeanMomentum),
        "running mean kernel");
  if (amp()) {
    Check(cuda::CastToHalf(precision_, inputs_[0].get(), half_in_[0].get(),
                           static_cast<size_t>(batch) * kInputDim),
          "cast the batch");
    if (!half_weights_cast_ || !half_weights_kept_) {
      for (size_t l = 0; l < used_layers_; ++l) {
        const Layer& layer = layers_[l];
        Check(cuda::CastToHalf(precision_, layer.weight.get(), half_weight_[l].get(),
                               static_cast<size_t>(layer.out) * layer.in),
              "cast the weights");
      }
      half_weights_cast_ = true;
    }
    for (size_t l = 0; l < used_layers_; ++l) LayerForwardAmp(l);
    Check(cuda::MseLossHalf(precision_, half_z_[used_layers_ - 1].get(), targets_.get(), batch,
                            loss_.get()),
          "loss kernel");
    return;
  }
  for (size_t l = 0; l < used_layers_; ++l) LayerForward(l);
  Check(cuda::MseLoss(z_[used_layers_ - 1].get(), targets_.get(), batch, loss_.get()),
        "loss kernel");
}

// As LayerForward, rounding as mlp.cpp does with a reduced precision: the
// weights and the input in 16 bits, the product in fp32, z = round(product +
// bias), the next layer's input relu(z).
void CudaMlp::Impl::LayerForwardAmp(size_t l) {
  const Layer& layer = layers_[l];
  GemmHalf(false, true, batch_, layer.out, layer.in, half_in_[l].get(), layer.in,
           half_weight_[l].get(), layer.in, acc_.get(), layer.out);
  uint16_t* relu = l + 1 < used_layers_ ? half_in_[l + 1].get() : nullptr;
  Check(cuda::BiasRound(precision_, acc_.get(), layer.bias.get(), half_z_[l].get(), relu, batch_,
                        layer.out),
        "bias kernel");
}

// z = input * W^T + b; the next layer's input is relu(z).
void CudaMlp::Impl::LayerForward(size_t l) {
  const Layer& layer = layers_[l];
  Gemm(false, true, batch_, layer.out, layer.in, inputs_[l].get(), layer.in, layer.weight.get(),
       layer.in, z_[l].get(), layer.out);
  float* relu = l + 1 < used_layers_ ? inputs_[l + 1].get() : nullptr;
  Check(cuda::AddBiasRelu(z_[l].get(), layer.bias.get(), relu, batch_, layer.out),
        "bias and relu kernel");
}

float CudaMlp::Impl::Loss() {
  double loss = NAN;
  Check(cudaMemcpy(&loss, loss_.get(), sizeof(double), cudaMemcpyDeviceToHost), "copy the loss");
  return static_cast<float>(loss);
}

void CudaMlp::Impl::Backward(float loss_scale, const std::function<void(size_t)>& on_ready) {
  if (batch_ == 0) return;  // Forward failed; error_ says why
  if (amp()) {
    Check(cuda::MseGradHalf(precision_, half_z_[used_layers_ - 1].get(), targets_.get(), batch_,
                            loss_scale, half_delta_.get()),
          "loss gradient kernel");
    for (size_t l = used_layers_; l-- > 0;) LayerBackwardAmp(l, on_ready);
    return;
  }
  Check(cuda::MseGrad(z_[used_layers_ - 1].get(), targets_.get(), batch_, loss_scale, delta_.get()),
        "loss gradient kernel");
  for (size_t l = used_layers_; l-- > 0;) LayerBackward(l, on_ready);
}

// As mlp.cpp: dW = delta^T * input, db = column sums of delta, then the
// previous layer's delta = (delta * W) where its z > 0.
void CudaMlp::Impl::LayerBackward(size_t l, const std::function<void(size_t)>& on_ready) {
  Layer& layer = layers_[l];
  Gemm(true, false, layer.out, layer.in, batch_, delta_.get(), layer.out, inputs_[l].get(),
       layer.in, params_[2 * l].grad, layer.in);
  Check(cuda::ColumnSums(delta_.get(), params_[2 * l + 1].grad, batch_, layer.out),
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

void CudaMlp::Impl::ZeroGrads() {
  for (size_t i = 2 * used_layers_; i < params_.size(); ++i) {
    const ddp::Parameter& p = params_[i];
    Check(cudaMemsetAsync(p.grad, 0, p.numel() * sizeof(float), cudaStreamLegacy),
          "zero gradients");
  }
}

HalfWeights CudaMlp::Impl::HandOverHalfWeights() {
  HalfWeights half{precision_, std::vector<uint16_t*>(params_.size(), nullptr)};
  if (!amp()) return half;
  for (size_t l = 0; l < half_weight_.size(); ++l) {
    half.copies[2 * l] = half_weight_[l].get();  // layer l's weight; its bias stays fp32
  }
  half_weights_kept_ = true;
  return half;
}

void CudaMlp::Impl::UseGradStorage(const std::vector<ddp::Parameter>& params) {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].grad = params[i].grad;
}

// As LayerBackward with 16-bit delta, input and weights: the gradients in
// fp32 (the master weights' precision), the next delta rounded.
void CudaMlp::Impl::LayerBackwardAmp(size_t l, const std::function<void(size_t)>& on_ready) {
  const Layer& layer = layers_[l];
  GemmHalf(true, false, layer.out, layer.in, batch_, half_delta_.get(), layer.out,
           half_in_[l].get(), layer.in, params_[2 * l].grad, layer.in);
  Check(cuda::ColumnSumsHalf(precision_, half_delta_.get(), params_[2 * l + 1].grad, batch_,
                             layer.out),
        "bias gradient kernel");
  on_ready(2 * l);
  on_ready(2 * l + 1);
  if (l == 0) return;
  GemmHalf(false, false, batch_, layer.in, layer.out, half_delta_.get(), layer.out,
           half_weight_[l].get(), layer.in, acc_.get(), layer.in);
  Check(cuda::MaskRound(precision_, acc_.get(), half_z_[l - 1].get(), half_next_delta_.get(),
                        static_cast<size_t>(batch_) * layer.in),
        "relu backward kernel");
  half_delta_.swap(half_next_delta_);
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
  if (Status s = impl->Init(host, config.precision); !s.ok()) {
    return s.Annotate("build the model on the device");
  }
  return std::make_unique<CudaMlp>(std::move(impl));
}

void CudaMlp::Forward(const float* x, const float* y, int batch) { impl_->Forward(x, y, batch); }

float CudaMlp::Loss() { return impl_->Loss(); }

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

void CudaMlp::ZeroGrads() { impl_->ZeroGrads(); }

void CudaMlp::UseGradStorage(const std::vector<ddp::Parameter>& params) {
  impl_->UseGradStorage(params);
}

HalfWeights CudaMlp::HandOverHalfWeights() { return impl_->HandOverHalfWeights(); }

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
