// How Gloo reduces a tensor of each DType: the element type it moves and
// the function that combines two buffers element by element. Every DType of
// ddp/tensor.hpp is supported: float32, float64, int32, int64 and uint8 with
// Gloo's own functions, float16 with Gloo's float16, bfloat16 (which Gloo
// lacks) through float with round-to-nearest-even.
#pragma once

#include <cstddef>
#include <functional>

#include "base/status.hpp"
#include "ddp/process_group.hpp"
#include "ddp/tensor.hpp"

namespace ddprun::ddp {

// c[i] = a[i] op b[i] for i < n (c may be a or b): gloo::AllreduceOptions::Func.
using GlooReduceFunc = std::function<void(void* c, const void* a, const void* b, size_t n)>;

// The reduction for `dtype`; kInvalidArgument naming the dtype for a value
// outside the DType list.
StatusOr<GlooReduceFunc> GlooReduceFor(DType dtype, ReduceOp op);

// bfloat16 as its bits: the upper half of a float32.
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float f);  // round to nearest even; NaN stays NaN
// IEEE float16 as its bits (Gloo's conversions).
float HalfBitsToFloat(uint16_t bits);
uint16_t FloatToHalfBits(float f);  // round to nearest even

}  // namespace ddprun::ddp
