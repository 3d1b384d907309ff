// Synthetic regression data, deterministic per seed: inputs uniform in
// [-1, 1)^32 drawn by global sample index, targets from a fixed "teacher"
// network generated from the same seed. Any rank can produce any sample, so
// a rank's shard and the union of all shards are the same numbers.
#pragma once

#include <cstdint>
#include <vector>

namespace ddprun::train {

inline constexpr int kInputDim = 32;

class SyntheticData {
 public:
  explicit SyntheticData(uint64_t seed);

  // Writes samples first .. first+count-1: `x` gets count*kInputDim floats
  // (row-major), `y` count targets.
  void Batch(uint64_t first, int count, float* x, float* y) const;

  // The first sample of rank `rank`'s shard at `step`: samples
  // (step*world + rank)*batch .. +batch-1.
  static uint64_t ShardStart(long step, int world, int rank, int batch);

 private:
  float Teacher(const float* x) const;

  static constexpr int kTeacherHidden = 16;
  uint64_t seed_;
  std::vector<float> w_;  // kTeacherHidden x kInputDim
  std::vector<float> c_;  // kTeacherHidden
  std::vector<float> a_;  // kTeacherHidden
};

}  // namespace ddprun::train
