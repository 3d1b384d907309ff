#include "examples/train/distributed_run.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ddp/flight_recorder.hpp"
#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"
#include "examples/train/data.hpp"
#include "examples/train/faults.hpp"
#include "examples/train/mlp.hpp"
#include "examples/train/report.hpp"
#include "examples/train/updater.hpp"

namespace ddprun::train {
namespace {

struct Rank {
  const TrainOptions& options;
  ddp::ProcessGroup& group;
  ddp::Reducer& reducer;
  Mlp& model;
  Updater& updater;
  SyntheticData data;
  std::vector<float> x, y;
};

ddp::ReducerOptions MakeReducerOptions(const TrainOptions& o) {
  ddp::ReducerOptions r;
  if (o.bucket_cap_mb > 0) r.bucket_cap_bytes = static_cast<size_t>(o.bucket_cap_mb * (1 << 20));
  r.find_unused_parameters = o.find_unused_parameters;
  r.broadcast_buffers = o.broadcast_buffers;
  return r;
}

// The mean of every rank's loss (one small all-reduce, on loss steps only).
StatusOr<float> MeanLoss(ddp::ProcessGroup& group, float loss) {
  Status s = group.AllReduce(ddp::View(&loss, 1), ddp::ReduceOp::kSum)->Wait();
  if (!s.ok()) return s.Annotate("all-reduce the loss");
  return loss / static_cast<float>(group.size());
}

Status Backward(Rank& r, long step) {
  const int rank = r.group.rank();
  std::vector<ddp::Parameter>& params = r.model.parameters();
  const long nan_index =
      InjectsNan(r.options, rank, r.group.size(), step) ? r.model.IndexOf(kNanParameter) : -1;
  r.model.ZeroGrads();
  r.reducer.BeginBackward();
  r.model.Backward(r.updater.loss_scale(), [&](size_t i) {
    if (static_cast<long>(i) == nan_index) params[i].grad[0] = NAN;
    r.reducer.MarkGradReady(i);
  });
  Status s = r.reducer.FinishBackward();
  if (!s.ok()) return s.Annotate("step " + std::to_string(step) + ": backward");
  const std::string notice = r.reducer.TakeNotice();
  if (!notice.empty() && rank == 0) std::fprintf(stderr, "train: rank 0: %s\n", notice.c_str());
  return Status::Ok();
}

Status RunStep(Rank& r, long step) {
  const int rank = r.group.rank();
  ddp::Heartbeat();
  MaybeCrash(r.options, rank, step);
  Status s = r.reducer.BeforeForward();
  if (!s.ok()) return s.Annotate("step " + std::to_string(step) + ": broadcast buffers");
  r.data.Batch(SyntheticData::ShardStart(step, r.group.size(), rank, r.options.batch),
               r.options.batch, r.x.data(), r.y.data());
  const float loss = r.model.Forward(r.x.data(), r.y.data(), r.options.batch);
  MaybeHang(r.options, rank, step);
  s = Backward(r, step);
  if (!s.ok()) return s;
  if (IsLossStep(step, r.options.steps)) {
    StatusOr<float> mean = MeanLoss(r.group, loss);
    if (!mean.ok()) return mean.status().Annotate("step " + std::to_string(step));
    if (rank == 0) PrintLoss(step, *mean);
  }
  return r.updater.Apply(step, rank == 0);
}

StatusOr<std::unique_ptr<ddp::ProcessGroup>> Connect(const TrainOptions& o) {
  StatusOr<ddp::LaunchEnv> env = ddp::ReadLaunchEnv();
  if (!env.ok()) return env.status();
  if (o.collective_timeout_s > 0) {
    env->timeout = std::chrono::milliseconds(std::llround(o.collective_timeout_s * 1000));
  }
  StatusOr<std::unique_ptr<ddp::ProcessGroup>> group =
      ddp::CreateProcessGroup(*env, ddp::Device::kCpu);
  if (!group.ok()) return group.status().Annotate("rank " + std::to_string(env->rank));
  if (o.collective_timeout_s > 0) (*group)->set_timeout(env->timeout);
  return group;
}

int Fail(int rank, const Status& s) {
  std::fprintf(stderr, "train: rank %d: %s\n", rank, s.message().c_str());
  std::fflush(nullptr);
  return 1;
}

}  // namespace

int RunDistributed(const TrainOptions& options) {
  StatusOr<std::unique_ptr<ddp::ProcessGroup>> group = Connect(options);
  if (!group.ok()) {
    std::fprintf(stderr, "train: %s\n", group.status().message().c_str());
    return group.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  ddp::ProcessGroup& pg = **group;
  Mlp model(
      MlpConfig{options.width, options.depth, options.unused_layer, options.amp, options.seed});
  StatusOr<std::unique_ptr<ddp::Reducer>> reducer =
      ddp::Reducer::Create(&pg, model.parameters(), model.buffers(), MakeReducerOptions(options));
  if (!reducer.ok()) return Fail(pg.rank(), reducer.status().Annotate("create the reducer"));
  Updater updater(options, &pg, &model.parameters());
  Rank r{options,
         pg,
         **reducer,
         model,
         updater,
         SyntheticData(options.seed),
         std::vector<float>(static_cast<size_t>(options.batch) * kInputDim),
         std::vector<float>(options.batch)};
  for (long step = 0; step < options.steps; ++step) {
    Status s = RunStep(r, step);
    if (!s.ok()) return Fail(pg.rank(), s);
  }
  PrintChecksum(("rank " + std::to_string(pg.rank())).c_str(), model);
  return 0;
}

}  // namespace ddprun::train
