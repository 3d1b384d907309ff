// The trainer's mixed-precision kernels (--amp on cuda): the element-wise
// half of an autocast step around the half-precision GEMMs, rounding exactly
// where the CPU emulation (mlp.cpp with a reduced Precision) rounds.
//
// 16-bit values are passed as uint16_t: the bits of an IEEE fp16 or a
// bfloat16, as `precision` (kFloat16 or kBFloat16) says; conversions round
// to nearest even. Each function launches on the legacy default stream and
// returns the launch error, as cuda_kernels.hpp. Matrices are row-major.
// Compiled only in a DDPRUN_HAVE_CUDA build.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "examples/train/options.hpp"

namespace ddprun::train::cuda {

// dst[k] = src[k] rounded to the precision.
cudaError_t CastToHalf(Precision precision, const float* src, uint16_t* dst, size_t n);
// z[j, c] = round(acc[j, c] + bias[c]); relu[j, c] = max(z[j, c], 0) unless
// relu is null (the last layer).
cudaError_t BiasRound(Precision precision, const float* acc, const float* bias, uint16_t* z,
                      uint16_t* relu, int rows, int cols);
// *loss = mean over j < n of (out[j] - y[j])^2, accumulated in double.
cudaError_t MseLossHalf(Precision precision, const uint16_t* out, const float* y, int n,
                        double* loss);
// delta[j] = round(scale * 2 * (out[j] - y[j]) / n).
cudaError_t MseGradHalf(Precision precision, const uint16_t* out, const float* y, int n,
                        float scale, uint16_t* delta);
// sums[c] = sum over j of delta[j, c], in fp32 (a block reduction: not the
// CPU loop's order).
cudaError_t ColumnSumsHalf(Precision precision, const uint16_t* delta, float* sums, int rows,
                           int cols);
// delta[k] = z[k] > 0 ? round(acc[k]) : 0: ReLU's backward on the product
// delta * W computed in fp32.
cudaError_t MaskRound(Precision precision, const float* acc, const uint16_t* z, uint16_t* delta,
                      size_t n);

}  // namespace ddprun::train::cuda
