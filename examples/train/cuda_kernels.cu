#include "examples/train/cuda_kernels.hpp"
#include "examples/train/cuda_launch.hpp"

namespace ddprun::train::cuda {
namespace {

// z[k] += bias of its column; with `relu`, relu[k] = max(z[k], 0) in the same pass.
__global__ void AddBiasReluKernel(float* z, const float* bias, float* relu, size_t n, int cols) {
  DDPRUN_FOR_EACH_INDEX(k, n) {
    const float v = z[k] + bias[k % cols];
    z[k] = v;
    if (relu != nullptr) relu[k] = v > 0 ? v : 0.0f;
  }
}

__global__ void ReluBackwardKernel(const float* z, float* delta, size_t n) {
  DDPRUN_FOR_EACH_INDEX(k, n) {
    if (!(z[k] > 0)) delta[k] = 0.0f;
  }
}

struct FloatAt {
  const float* a;
  __device__ float operator()(size_t k) const { return a[k]; }
};

struct StoreRunningMean {
  float* mean;
  int rows;
  float momentum;
  __device__ void operator()(int c, float sum) const {
    mean[c] += momentum * (sum / rows - mean[c]);
  }
};

__global__ void ColumnSumsKernel(const float* a, float* sums, int rows, int cols) {
  ColumnSumsInBlock(FloatAt{a}, rows, cols, StoreSum{sums});
}

__global__ void RunningMeanKernel(const float* x, float* mean, int rows, int cols, float momentum) {
  ColumnSumsInBlock(FloatAt{x}, rows, cols, StoreRunningMean{mean, rows, momentum});
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

// Where an optimizer writes the 16-bit copy of the value it just stored: nowhere, or dst as H.
struct NoCopy {
  __device__ void operator()(size_t, float) const {}
};

template <typename H>
struct CopyAs {
  uint16_t* dst;
  __device__ void operator()(size_t i, float value) const { dst[i] = H::Round(value); }
};

template <typename Copy>
__global__ void SgdKernel(float* p, const float* g, size_t n, float lr, Copy copy) {
  DDPRUN_FOR_EACH_INDEX(i, n) {
    const float value = p[i] - lr * g[i];
    p[i] = value;
    copy(i, value);
  }
}

template <typename Copy>
__global__ void AdamKernel(float* p, const float* g, float* m, float* v, size_t n, AdamStepArgs a,
                           Copy copy) {
  DDPRUN_FOR_EACH_INDEX(i, n) {
    const float grad = g[i];
    m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * grad;
    v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * grad * grad;
    const float value = p[i] - a.step_size * m[i] / (sqrtf(v[i]) / a.sqrt_correction2 + a.eps);
    p[i] = value;
    copy(i, value);
  }
}

// Launches kernel with the Copy that `copy` asks for as its last argument.
#define LAUNCH_WITH_COPY(kernel, n, copy, ...)                                 \
  do {                                                                         \
    if ((copy).data == nullptr) {                                              \
      kernel<<<Blocks(n), kThreads>>>(__VA_ARGS__, NoCopy{});                  \
    } else if ((copy).precision == Precision::kBFloat16) {                     \
      kernel<<<Blocks(n), kThreads>>>(__VA_ARGS__, CopyAs<Bf16>{(copy).data}); \
    } else {                                                                   \
      kernel<<<Blocks(n), kThreads>>>(__VA_ARGS__, CopyAs<Fp16>{(copy).data}); \
    }                                                                          \
  } while (false)

}  // namespace

cudaError_t AddBiasRelu(float* z, const float* bias, float* relu, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  AddBiasReluKernel<<<Blocks(n), kThreads>>>(z, bias, relu, n, cols);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* z, float* delta, size_t n) {
  ReluBackwardKernel<<<Blocks(n), kThreads>>>(z, delta, n);
  return cudaGetLastError();
}

cudaError_t ColumnSums(const float* delta, float* bias_grad, int rows, int cols) {
  ColumnSumsKernel<<<SumBlocks(cols), SumThreads()>>>(delta, bias_grad, rows, cols);
  return cudaGetLastError();
}

cudaError_t UpdateRunningMean(const float* x, float* mean, int rows, int cols, float momentum) {
  RunningMeanKernel<<<SumBlocks(cols), SumThreads()>>>(x, mean, rows, cols, momentum);
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

cudaError_t SgdStep(float* p, const float* g, size_t n, float lr, const HalfCopy& copy) {
  LAUNCH_WITH_COPY(SgdKernel, n, copy, p, g, n, lr);
  return cudaGetLastError();
}

cudaError_t AdamStep(float* p, const float* g, float* m, float* v, size_t n,
                     const AdamStepArgs& args, const HalfCopy& copy) {
  LAUNCH_WITH_COPY(AdamKernel, n, copy, p, g, m, v, n, args);
  return cudaGetLastError();
}

#undef LAUNCH_WITH_COPY

}  // namespace ddprun::train::cuda
