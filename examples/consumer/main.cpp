// consumer: a C++ worker of its own, built against the installed DDP core
// (find_package(ddprun) or pkg-config ddprun-ddp; README.md, "Install").
// Under ddprun every rank fits y = w.x + b to its own shard of synthetic data;
// the reducer averages the gradients, so every rank ends with the same
// parameters and prints the same checksum:
//   ddprun --nproc_per_node=2 ./consumer
#include <algorithm>
#include <cstdio>
#include <vector>

#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"

namespace ddp = ddprun::ddp;

namespace {

constexpr int kFeatures = 4;
constexpr int kBatch = 16;
constexpr int kSteps = 50;
constexpr float kLearningRate = 0.05f;

int Fail(const char* what, const ddprun::Status& s) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, s.message().c_str());
  return 1;
}

// The next sample of a shard: x from an LCG in [-0.5, 0.5), y = x0 - 2x1 + 3x2 - 4x3 + 0.5.
float Sample(unsigned& state, float* x) {
  float y = 0.5f;
  for (int j = 0; j < kFeatures; ++j) {
    state = state * 1664525u + 1013904223u;
    x[j] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    y += static_cast<float>(j % 2 == 0 ? j + 1 : -(j + 1)) * x[j];
  }
  return y;
}

}  // namespace

int main() {
  ddprun::StatusOr<ddp::LaunchEnv> env = ddp::ReadLaunchEnv();
  if (!env.ok()) return Fail("read the launch environment", env.status());
  auto group = ddp::CreateProcessGroup(*env, ddp::Device::kCpu);  // Gloo
  if (!group.ok()) return Fail("create the process group", group.status());
  std::vector<float> w(kFeatures + 1, 0.0f), grad(kFeatures + 1, 0.0f);  // weights, then bias
  std::vector<ddp::Parameter> params = {
      {"weight", {kFeatures}, w.data(), grad.data()},
      {"bias", {1}, w.data() + kFeatures, grad.data() + kFeatures}};
  auto reducer = ddp::Reducer::Create(group->get(), params, {}, {});
  if (!reducer.ok()) return Fail("create the reducer", reducer.status());

  unsigned state = 12345u + 7919u * static_cast<unsigned>(env->rank);  // this rank's shard
  for (int step = 0; step < kSteps; ++step) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (int i = 0; i < kBatch; ++i) {  // forward and backward of the mean squared error
      float x[kFeatures];
      const float y = Sample(state, x);
      float error = w[kFeatures] - y;
      for (int j = 0; j < kFeatures; ++j) error += w[j] * x[j];
      for (int j = 0; j < kFeatures; ++j) grad[j] += 2.0f * error * x[j] / kBatch;
      grad[kFeatures] += 2.0f * error / kBatch;
    }
    (*reducer)->BeginBackward();
    (*reducer)->MarkGradReady(1);  // in backward's order: the bias, then the weights
    (*reducer)->MarkGradReady(0);
    const ddprun::Status s = (*reducer)->FinishBackward();
    if (!s.ok()) return Fail("reduce the gradients", s);
    for (size_t j = 0; j < w.size(); ++j) w[j] -= kLearningRate * grad[j];
  }
  double checksum = 0;
  for (float v : w) checksum += v;
  std::printf("rank %d checksum %.9g\n", env->rank, checksum);  // as examples/train prints it
  return 0;
}
