// Emulated reduced precision on the CPU: float <-> IEEE fp16 and bfloat16
// with round-to-nearest-even, and rounding a float array through either, so
// the trainer can mimic autocast's fp16/bf16 activations and gradients while
// keeping fp32 master weights.
#pragma once

#include <cstddef>
#include <cstdint>

#include "examples/train/options.hpp"

namespace ddprun::train {

uint16_t FloatToHalf(float f);  // overflow gives +-inf, NaN stays NaN
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);

// Replaces each value by its nearest `precision` value (a no-op for kFloat32).
void RoundThrough(Precision precision, float* values, size_t count);

}  // namespace ddprun::train
