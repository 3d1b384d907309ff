#include "examples/train/data.hpp"

#include <cmath>

#include "examples/train/random.hpp"

namespace ddprun::train {
namespace {

// A constant part of the target: what a fresh network learns first, so the
// loss falls visibly within a few tens of steps.
constexpr float kTeacherOffset = 1.0f;

}  // namespace

SyntheticData::SyntheticData(uint64_t seed)
    : seed_(seed), w_(kTeacherHidden * kInputDim), c_(kTeacherHidden), a_(kTeacherHidden) {
  uint64_t n = 0;
  for (float& w : w_) w = UniformAt(seed, kTeacherStream, n++) * 0.5f;
  for (float& c : c_) c = UniformAt(seed, kTeacherStream, n++) * 0.5f;
  for (float& a : a_) a = UniformAt(seed, kTeacherStream, n++) * 0.25f;
}

float SyntheticData::Teacher(const float* x) const {
  float y = kTeacherOffset;
  for (int k = 0; k < kTeacherHidden; ++k) {
    float z = c_[k];
    for (int d = 0; d < kInputDim; ++d) z += w_[k * kInputDim + d] * x[d];
    y += a_[k] * std::tanh(z);
  }
  return y;
}

void SyntheticData::Batch(uint64_t first, int count, float* x, float* y) const {
  for (int j = 0; j < count; ++j) {
    const uint64_t sample = first + j;
    float* row = x + static_cast<size_t>(j) * kInputDim;
    for (int d = 0; d < kInputDim; ++d) {
      row[d] = UniformAt(seed_, kInputStream, sample * kInputDim + d);
    }
    y[j] = Teacher(row);
  }
}

uint64_t SyntheticData::ShardStart(long step, int world, int rank, int batch) {
  return (static_cast<uint64_t>(step) * world + rank) * batch;
}

}  // namespace ddprun::train
