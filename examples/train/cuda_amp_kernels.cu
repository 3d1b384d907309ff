#include "examples/train/cuda_amp_kernels.hpp"
#include "examples/train/cuda_launch.hpp"

namespace ddprun::train::cuda {
namespace {

template <typename H>
__global__ void CastKernel(const float* src, uint16_t* dst, size_t n) {
  DDPRUN_FOR_EACH_INDEX(k, n) dst[k] = H::Round(src[k]);
}

template <typename H>
__global__ void BiasRoundKernel(const float* acc, const float* bias, uint16_t* z, uint16_t* relu,
                                size_t n, int cols) {
  DDPRUN_FOR_EACH_INDEX(k, n) {
    const uint16_t rounded = H::Round(acc[k] + bias[k % cols]);
    z[k] = rounded;
    if (relu != nullptr) relu[k] = H::Load(rounded) > 0 ? rounded : H::Round(0.0f);
  }
}

template <typename H>
struct HalfOutput {
  const uint16_t* out;
  __device__ double operator()(int j) const { return H::Load(out[j]); }
};

template <typename H>
__global__ void MseLossKernel(const uint16_t* out, const float* y, int n, double* loss) {
  MeanSquaredErrorInBlock(HalfOutput<H>{out}, y, n, loss);
}

template <typename H>
__global__ void MseGradKernel(const uint16_t* out, const float* y, int n, float scale,
                              uint16_t* delta) {
  DDPRUN_FOR_EACH_INDEX(j, static_cast<size_t>(n)) {
    delta[j] = H::Round(scale * 2.0f * (H::Load(out[j]) - y[j]) / static_cast<float>(n));
  }
}

template <typename H>
struct HalfAt {
  const uint16_t* a;
  __device__ float operator()(size_t k) const { return H::Load(a[k]); }
};

template <typename H>
__global__ void ColumnSumsKernel(const uint16_t* a, float* sums, int rows, int cols) {
  ColumnSumsInBlock(HalfAt<H>{a}, rows, cols, StoreSum{sums});
}

template <typename H>
__global__ void MaskRoundKernel(const float* acc, const uint16_t* z, uint16_t* delta, size_t n) {
  DDPRUN_FOR_EACH_INDEX(k, n) delta[k] = H::Load(z[k]) > 0 ? H::Round(acc[k]) : H::Round(0.0f);
}

// Launches Kernel<Fp16> or Kernel<Bf16> as `precision` says.
#define LAUNCH(kernel, precision, blocks, threads, ...)   \
  do {                                                    \
    if ((precision) == Precision::kBFloat16) {            \
      kernel<Bf16><<<(blocks), (threads)>>>(__VA_ARGS__); \
    } else {                                              \
      kernel<Fp16><<<(blocks), (threads)>>>(__VA_ARGS__); \
    }                                                     \
  } while (false)

}  // namespace

cudaError_t CastToHalf(Precision precision, const float* src, uint16_t* dst, size_t n) {
  LAUNCH(CastKernel, precision, Blocks(n), kThreads, src, dst, n);
  return cudaGetLastError();
}

cudaError_t BiasRound(Precision precision, const float* acc, const float* bias, uint16_t* z,
                      uint16_t* relu, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  LAUNCH(BiasRoundKernel, precision, Blocks(n), kThreads, acc, bias, z, relu, n, cols);
  return cudaGetLastError();
}

cudaError_t MseLossHalf(Precision precision, const uint16_t* out, const float* y, int n,
                        double* loss) {
  LAUNCH(MseLossKernel, precision, 1, kThreads, out, y, n, loss);
  return cudaGetLastError();
}

cudaError_t MseGradHalf(Precision precision, const uint16_t* out, const float* y, int n,
                        float scale, uint16_t* delta) {
  LAUNCH(MseGradKernel, precision, Blocks(n), kThreads, out, y, n, scale, delta);
  return cudaGetLastError();
}

cudaError_t ColumnSumsHalf(Precision precision, const uint16_t* delta, float* sums, int rows,
                           int cols) {
  LAUNCH(ColumnSumsKernel, precision, SumBlocks(cols), SumThreads(), delta, sums, rows, cols);
  return cudaGetLastError();
}

cudaError_t MaskRound(Precision precision, const float* acc, const uint16_t* z, uint16_t* delta,
                      size_t n) {
  LAUNCH(MaskRoundKernel, precision, Blocks(n), kThreads, acc, z, delta, n);
  return cudaGetLastError();
}

#undef LAUNCH

}  // namespace ddprun::train::cuda
