// The trainer's model on a CUDA device: the same MLP, initialisation, loss
// and backward order as Mlp (mlp.hpp), with parameters, gradients and
// activations in device memory of the current device, GEMMs on cuBLAS
// (fp32, no TF32) and the rest in small kernels (cuda_kernels.hpp), all on
// the legacy default stream.
//
// Mixed precision (MlpConfig::precision fp16 or bf16, train --amp): the
// master weights, their gradients and the optimizer stay fp32; the first
// forward casts the weights to 16 bits and the optimizer's updates keep that
// copy (HandOverHalfWeights; else each forward casts them), activations and backpropagated deltas
// are 16-bit, and every GEMM multiplies 16-bit operands into fp32 on the tensor cores
// (cublasGemmEx, CUBLAS_COMPUTE_32F), then rounds where Mlp's emulation rounds
// (cuda_amp_kernels.hpp): the CPU --reference --amp run is the same arithmetic up to the GEMMs'
// summation order.
//
// Forward takes the batch in host memory and copies it to the device (the
// data are generated on the host exactly as on the CPU path). The
// ddp::Parameter/Buffer values hold device pointers, valid for the object's
// lifetime. CUDA and cuBLAS failures do not stop a step: the first one is
// kept and TakeError() returns it (the caller checks once per step).
// Not thread-safe. Compiled
// only in a DDPRUN_HAVE_CUDA build; this header needs no CUDA headers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.hpp"
#include "ddp/reducer.hpp"
#include "examples/train/mlp.hpp"

namespace ddprun::train {

// Per parameter, the 16-bit copy of its values that --amp's forward
// multiplies (null where there is none: biases, the fp32 model), and their
// precision.
struct HalfWeights {
  Precision precision = Precision::kFloat32;
  std::vector<uint16_t*> copies;
};

class CudaMlp {
 public:
  // Allocates the model on the current device, initialised as Mlp(config).
  static StatusOr<std::unique_ptr<CudaMlp>> Create(const MlpConfig& config);
  ~CudaMlp();
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  // As Mlp, with `x` and `y` in host memory, copied to the device
  // asynchronously (through pinned memory): Forward does not wait for the
  // device; Loss() does.
  void Forward(const float* x, const float* y, int batch);
  float Loss();
  void Backward(float loss_scale, const std::function<void(size_t)>& on_ready);

  std::vector<ddp::Parameter>& parameters();
  std::vector<ddp::Buffer> buffers();
  long IndexOf(const char* name) const;
  void ZeroGrads();  // as Mlp: the unused layer's
  void UseGradStorage(const std::vector<ddp::Parameter>& params);
  // --amp: from the second forward on, the model no longer casts its fp32
  // weights to 16 bits each forward (the first does): the caller's optimizer
  // writes the returned copies as it updates the weights
  // (MakeCudaOptimizer), and nothing else may change the weights. Empty
  // copies for the fp32 model.
  HalfWeights HandOverHalfWeights();
  // Sets element 0 of parameter `index`'s gradient to NaN.
  void SetGradNan(size_t index);

  // As Mlp::Checksum, on the parameters copied back to the host.
  double Checksum();
  // The first CUDA or cuBLAS error since the last call, or Ok.
  Status TakeError();

  class Impl;
  explicit CudaMlp(std::unique_ptr<Impl> impl);  // use Create()

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::train
