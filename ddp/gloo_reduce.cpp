#include "ddp/gloo_reduce.hpp"

#include <gloo/math.h>
#include <gloo/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace ddprun::ddp {

namespace {

template <typename T>
GlooReduceFunc GlooFunc(ReduceOp op) {
  if (op == ReduceOp::kMax) {
    return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
  }
  return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
}

// Each element widened to float, combined, and rounded back once.
GlooReduceFunc BFloat16Func(ReduceOp op) {
  return [op](void* c, const void* a, const void* b, size_t n) {
    auto* out = static_cast<uint16_t*>(c);
    const auto* x = static_cast<const uint16_t*>(a);
    const auto* y = static_cast<const uint16_t*>(b);
    for (size_t i = 0; i < n; ++i) {
      const float fx = BFloat16ToFloat(x[i]), fy = BFloat16ToFloat(y[i]);
      out[i] = op == ReduceOp::kMax ? (fx < fy ? y[i] : x[i]) : FloatToBFloat16(fx + fy);
    }
  };
}

}  // namespace

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet, never infinity
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float HalfBitsToFloat(uint16_t bits) {
  gloo::float16 h;
  h.x = bits;
  return gloo::cpu_half2float(h);
}

uint16_t FloatToHalfBits(float f) { return gloo::cpu_float2half_rn(f).x; }

StatusOr<GlooReduceFunc> GlooReduceFor(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32:
      return GlooFunc<float>(op);
    case DType::kFloat64:
      return GlooFunc<double>(op);
    case DType::kFloat16:
      return GlooFunc<gloo::float16>(op);
    case DType::kBFloat16:
      return BFloat16Func(op);
    case DType::kInt32:
      return GlooFunc<int32_t>(op);
    case DType::kInt64:
      return GlooFunc<int64_t>(op);
    case DType::kUInt8:
      return GlooFunc<uint8_t>(op);
  }
  return InvalidArgument("dtype " + std::to_string(static_cast<int>(dtype)) +
                         " is not one gloo can reduce: float32, float16, bfloat16, float64, int32, "
                         "int64 or uint8");
}

}  // namespace ddprun::ddp
