// The trainer's small CUDA kernels: everything of the MLP's step that is not
// a GEMM (those go to cuBLAS), and the optimizers' element-wise updates.
//
// Each function launches on the legacy default stream (asynchronous; the
// MLP's cuBLAS calls run there too, so everything stays in issue order),
// touches only device memory, and returns the launch error. Matrices are
// row-major. Compiled only in a DDPRUN_HAVE_CUDA build.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "examples/train/options.hpp"

namespace ddprun::train::cuda {

// z[j, o] += bias[o] for a rows x cols z; then, unless relu is null,
// relu[k] = max(z[k], 0) (the next layer's input) in the same pass.
cudaError_t AddBiasRelu(float* z, const float* bias, float* relu, int rows, int cols);
// delta[k] = 0 where !(z[k] > 0): ReLU's backward, in place.
cudaError_t ReluBackward(const float* z, float* delta, size_t n);
// bias_grad[o] = sum over j of delta[j, o] (rows x cols delta).
cudaError_t ColumnSums(const float* delta, float* bias_grad, int rows, int cols);
// mean[d] += momentum * (column mean of x[:, d] - mean[d]) (rows x cols x).
cudaError_t UpdateRunningMean(const float* x, float* mean, int rows, int cols, float momentum);
// *loss = mean over j < n of (out[j] - y[j])^2, accumulated in double.
cudaError_t MseLoss(const float* out, const float* y, int n, double* loss);
// delta[j] = scale * 2 * (out[j] - y[j]) / n: the MSE loss's gradient.
cudaError_t MseGrad(const float* out, const float* y, int n, float scale, float* delta);

// The optimizers' steps below also write, where `data` is set, the updated
// values rounded to `precision` (fp16 or bf16) into data[i]: --amp's 16-bit
// copy of the weights, made in the update's pass instead of a cast of its own
// (which read every fp32 weight once more each step).
struct HalfCopy {
  Precision precision = Precision::kFloat32;
  uint16_t* data = nullptr;
};

// p[i] -= lr * g[i].
cudaError_t SgdStep(float* p, const float* g, size_t n, float lr, const HalfCopy& copy = {});
// Adam (PyTorch's formula, as optimizer.cpp): m, v updated in place, then
// p[i] -= step_size * m[i] / (sqrt(v[i]) / sqrt_correction2 + eps).
struct AdamStepArgs {
  float beta1, beta2, eps, step_size, sqrt_correction2;
};
cudaError_t AdamStep(float* p, const float* g, float* m, float* v, size_t n,
                     const AdamStepArgs& args, const HalfCopy& copy = {});

}  // namespace ddprun::train::cuda
