#include "examples/train/random.hpp"

namespace ddprun::train {
namespace {

// SplitMix64's finalizer: a bijection that mixes every input bit.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

float UniformAt(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t bits = Mix(Mix(Mix(seed) ^ stream) ^ index);
  // The top 24 bits, exactly representable as a float.
  return static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace ddprun::train
