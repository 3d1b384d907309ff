#include "examples/train/reference_run.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include "examples/train/data.hpp"
#include "examples/train/faults.hpp"
#include "examples/train/local_group.hpp"
#include "examples/train/mlp.hpp"
#include "examples/train/openblas_kernels.hpp"
#include "examples/train/report.hpp"
#include "examples/train/updater.hpp"

namespace ddprun::train {
namespace {

struct Reference {
  const TrainOptions& options;
  SyntheticData data;
  Mlp model;
  LocalGroup group;
  Updater updater;
  std::vector<std::vector<float>> grad_sums;  // per parameter
  std::vector<float> x, y;

  explicit Reference(const TrainOptions& o)
      : options(o),
        data(o.seed),
        model(MlpConfig{o.width, o.depth, o.unused_layer, o.amp, o.seed}),
        updater(o, &group, &model.parameters()),
        x(static_cast<size_t>(o.batch) * kInputDim),
        y(o.batch) {
    for (const ddp::Parameter& p : model.parameters()) grad_sums.emplace_back(p.numel());
  }
};

// Forward and backward on shard `rank`; adds its gradients to grad_sums.
float RunShard(Reference& r, long step, int rank) {
  const TrainOptions& o = r.options;
  r.data.Batch(SyntheticData::ShardStart(step, o.world_size, rank, o.batch), o.batch, r.x.data(),
               r.y.data());
  r.model.Forward(r.x.data(), r.y.data(), o.batch);
  const float loss = r.model.Loss();
  r.model.ZeroGrads();
  std::vector<ddp::Parameter>& params = r.model.parameters();
  const long nan_index =
      InjectsNan(o, rank, o.world_size, step) ? r.model.IndexOf(kNanParameter) : -1;
  r.model.Backward(r.updater.loss_scale(), [&](size_t i) {
    if (static_cast<long>(i) == nan_index) params[i].grad[0] = NAN;
  });
  for (size_t i = 0; i < params.size(); ++i) {
    for (size_t k = 0; k < r.grad_sums[i].size(); ++k) r.grad_sums[i][k] += params[i].grad[k];
  }
  return loss;
}

Status RunStep(Reference& r, long step) {
  const int world = r.options.world_size;
  for (std::vector<float>& sum : r.grad_sums) std::fill(sum.begin(), sum.end(), 0.0f);
  double loss = 0;
  for (int rank = 0; rank < world; ++rank) loss += RunShard(r, step, rank);
  std::vector<ddp::Parameter>& params = r.model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    for (size_t k = 0; k < r.grad_sums[i].size(); ++k) {
      params[i].grad[k] = r.grad_sums[i][k] / static_cast<float>(world);
    }
  }
  if (IsLossStep(step, r.options.steps)) {
    PrintLoss(step, static_cast<float>(loss / world));
    if (Status s = CheckLoss(step, static_cast<float>(loss / world), r.options); !s.ok()) {
      return s;
    }
  }
  return r.updater.Apply(step, /*report=*/true);
}

}  // namespace

int RunReference(const TrainOptions& options) {
  if (!OpenBlasHasRoom("reference")) return 1;
  Reference r(options);
  for (long step = 0; step < options.steps; ++step) {
    Status s = RunStep(r, step);
    if (!s.ok()) {
      std::fprintf(stderr, "train: reference: %s\n", s.message().c_str());
      return 1;
    }
  }
  PrintChecksum("reference", r.model);
  // Under ddprun, OMP_NUM_THREADS is set for the workers (and logged).
  std::printf(
      "reference: GEMMs on %d thread(s): a DDP run reproduces the checksum with as many "
      "per rank (OMP_NUM_THREADS)\n",
      GemmThreads());
  return 0;
}

}  // namespace ddprun::train
