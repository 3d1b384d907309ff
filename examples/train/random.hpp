// Counter-based random numbers: a value is a pure function of (seed, stream,
// index), so any sample or weight can be generated on any rank, in any
// order, with the same result on every platform.
#pragma once

#include <cstdint>

namespace ddprun::train {

// Uniform in [-1, 1).
float UniformAt(uint64_t seed, uint64_t stream, uint64_t index);

// The streams the trainer draws from, one per purpose.
enum Stream : uint64_t {
  kInputStream = 1,
  kTeacherStream = 2,
  kParameterStream = 1000,  // + the parameter's index
};

}  // namespace ddprun::train
