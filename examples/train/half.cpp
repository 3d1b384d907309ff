#include "examples/train/half.hpp"

#include <cmath>
#include <cstring>

namespace ddprun::train {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

uint16_t FloatToHalf(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  // 65520 and above round to inf (65520 is the tie between 65504 and 2^16).
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    // Below 2^-14: a half subnormal, in units of 2^-24. The product is exact;
    // nearbyint rounds to nearest even in the default rounding mode.
    const float units = std::nearbyint(FromBits(abs) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  // Normal: round the 23-bit mantissa to 10 bits (ties to even), then rebias
  // the exponent from 127 to 15; a carry into the exponent is correct.
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) / 16777216.0f;
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000u | (mantissa << 13));
  return FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float BFloat16ToFloat(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

void RoundThrough(Precision precision, float* values, size_t count) {
  if (precision == Precision::kFloat16) {
    for (size_t i = 0; i < count; ++i) values[i] = HalfToFloat(FloatToHalf(values[i]));
  } else if (precision == Precision::kBFloat16) {
    for (size_t i = 0; i < count; ++i) values[i] = BFloat16ToFloat(FloatToBFloat16(values[i]));
  }
}

}  // namespace ddprun::train
