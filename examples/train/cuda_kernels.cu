#include "examples/train/cuda_kernels.hpp"
#include "examples/train/cuda_launch.hpp"

namespace ddprun::train::cuda {
namespace {

__global__ void AddBiasKernel(float* z, const float* bias, size_t n, int cols) {
  DDPRUN_FOR_EACH_INDEX(k, n) z[k] += bias[k % cols];
}

__global__ void ReluKernel(const float* z, float* out, size_t n) {
  DDPRUN_FOR_EACH_INDEX(k, n) out[k] = z[k] > 0 ? z[k] : 0.0f;
}

__global__ void ReluBackwardKernel(const float* z, float* delta, size_t n) {
  DDPRUN_FOR_EACH_INDEX(k, n) {
    if (!(z[k] > 0)) delta[k] = 0.0f;
  }
}

// One thread per column, rows summed in order (as the CPU loop does).
__global__ void ColumnSumsKernel(const float* a, float* sums, int rows, int cols) {
  DDPRUN_FOR_EACH_INDEX(c, static_cast<size_t>(cols)) {
    float sum = 0;
    for (int j = 0; j < rows; ++j) sum += a[static_cast<size_t>(j) * cols + c];
    sums[c] = sum;
  }
}

__global__ void RunningMeanKernel(const float* x, float* mean, int rows, int cols, float momentum) {
  DDPRUN_FOR_EACH_INDEX(c, static_cast<size_t>(cols)) {
    float sum = 0;
    for (int j = 0; j < rows; ++j) sum += x[static_cast<size_t>(j) * cols + c];
    mean[c] += momentum * (sum / rows - mean[c]);
  }
}

struct FloatOutput {
  const float* out;
  __device__ double operator()(int j) const { return out[j]; }
};

__global__ void MseLossKernel(const float* out, const float* y, int n, double* loss) {
  MeanSquaredErrorInBlock(FloatOutput{out}, y, n, loss);
}

__global__ void MseGradKernel(const float* out, const float* y, int n, float scale, float* delta) {
  DDPRUN_FOR_EACH_INDEX(j, static_cast<size_t>(n)) {
    delta[j] = scale * 2.0f * (out[j] - y[j]) / static_cast<float>(n);
  }
}

__global__ void SgdKernel(float* p, const float* g, size_t n, float lr) {
  DDPRUN_FOR_EACH_INDEX(i, n) p[i] -= lr * g[i];
}

__global__ void AdamKernel(float* p, const float* g, float* m, float* v, size_t n, AdamStepArgs a) {
  DDPRUN_FOR_EACH_INDEX(i, n) {
    const float grad = g[i];
    m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * grad;
    v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * grad * grad;
    p[i] -= a.step_size * m[i] / (sqrtf(v[i]) / a.sqrt_correction2 + a.eps);
  }
}

}  // namespace

cudaError_t AddBias(float* z, const float* bias, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  AddBiasKernel<<<Blocks(n), kThreads>>>(z, bias, n, cols);
  return cudaGetLastError();
}

cudaError_t Relu(const float* z, float* out, size_t n) {
  ReluKernel<<<Blocks(n), kThreads>>>(z, out, n);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* z, float* delta, size_t n) {
  ReluBackwardKernel<<<Blocks(n), kThreads>>>(z, delta, n);
  return cudaGetLastError();
}

cudaError_t ColumnSums(const float* delta, float* bias_grad, int rows, int cols) {
  ColumnSumsKernel<<<Blocks(cols), kThreads>>>(delta, bias_grad, rows, cols);
  return cudaGetLastError();
}

cudaError_t UpdateRunningMean(const float* x, float* mean, int rows, int cols, float momentum) {
  RunningMeanKernel<<<Blocks(cols), kThreads>>>(x, mean, rows, cols, momentum);
  return cudaGetLastError();
}

cudaError_t MseLoss(const float* out, const float* y, int n, double* loss) {
  MseLossKernel<<<1, kThreads>>>(out, y, n, loss);
  return cudaGetLastError();
}

cudaError_t MseGrad(const float* out, const float* y, int n, float scale, float* delta) {
  MseGradKernel<<<Blocks(n), kThreads>>>(out, y, n, scale, delta);
  return cudaGetLastError();
}

cudaError_t SgdStep(float* p, const float* g, size_t n, float lr) {
  SgdKernel<<<Blocks(n), kThreads>>>(p, g, n, lr);
  return cudaGetLastError();
}

cudaError_t AdamStep(float* p, const float* g, float* m, float* v, size_t n,
                     const AdamStepArgs& args) {
  AdamKernel<<<Blocks(n), kThreads>>>(p, g, m, v, n, args);
  return cudaGetLastError();
}

}  // namespace ddprun::train::cuda
