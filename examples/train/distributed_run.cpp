#include "examples/train/distributed_run.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/format.hpp"
#include "ddp/error_file.hpp"
#include "ddp/flight_recorder.hpp"
#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"
#include "examples/train/data.hpp"
#include "examples/train/faults.hpp"
#include "examples/train/mlp.hpp"
#include "examples/train/openblas_kernels.hpp"
#include "examples/train/report.hpp"
#include "examples/train/updater.hpp"

#ifdef DDPRUN_HAVE_CUDA
#include "examples/train/cuda_device.hpp"
#include "examples/train/cuda_mlp.hpp"
#include "examples/train/cuda_optimizer.hpp"
#endif

namespace ddprun::train {
namespace {

// The training loop is one template over the model: Mlp (host memory, Gloo)
// or CudaMlp (device memory, NCCL); both have the same interface.
template <typename Model>
struct Rank {
  const TrainOptions& options;
  ddp::ProcessGroup& group;
  ddp::Reducer& reducer;
  Model& model;
  Updater& updater;
  SyntheticData data;
  std::vector<float> x, y;
  std::vector<long> step_us, backward_us;  // with --time
  int grad_layout = 0;                     // the reducer's layout the model writes into
};

// With gradients as bucket views, the model writes them where the reducer
// keeps them (moved at construction and once more at the bucket rebuild).
template <typename Model>
void FollowGradStorage(Rank<Model>& r) {
  if (r.reducer.layout_generation() == r.grad_layout) return;
  r.model.UseGradStorage(r.reducer.parameters());
  r.grad_layout = r.reducer.layout_generation();
}

long MicrosSince(std::chrono::steady_clock::time_point t0) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

// Which rank made a gradient inf/NaN: with the scaler, whose check sees the
// reduced sum (on the host only: the reducer checks no device memory yet).
bool FindsNonFiniteOrigin(const TrainOptions& o) { return o.UseScaler() && o.device != "cuda"; }

ddp::ReducerOptions MakeReducerOptions(const TrainOptions& o) {
  ddp::ReducerOptions r;
  if (o.bucket_cap_mb > 0) r.bucket_cap_bytes = static_cast<size_t>(o.bucket_cap_mb * (1 << 20));
  r.find_unused_parameters = o.find_unused_parameters;
  r.broadcast_buffers = o.broadcast_buffers;
  r.gradient_as_bucket_view = !o.grad_copies;
  r.find_nonfinite_origin = FindsNonFiniteOrigin(o);
  // What changes the gradients' scale, the update, or the collectives'
  // order and sizes (ranks may differ in copies, find-unused and the faults
  // of --hang-rank; --nan-at-step turns the grad scaler on: attack 91).
  const auto flag = [](bool on) { return std::string(on ? "on" : "off"); };
  char lr[32];
  std::snprintf(lr, sizeof(lr), "%.9g", static_cast<double>(o.lr));
  char cap[32];
  std::snprintf(cap, sizeof(cap), "%.9g", o.bucket_cap_mb > 0 ? o.bucket_cap_mb : 25.0);
  r.same_on_every_rank = {
      {"--amp", o.amp == Precision::kFloat16    ? "fp16"
                : o.amp == Precision::kBFloat16 ? "bf16"
                                                : "off"},
      {"--optimizer", o.optimizer == OptimizerKind::kAdam ? "adam" : "sgd"},
      {"--lr", lr},
      {"--clip", flag(o.clip)},
      {"--steps", std::to_string(o.steps)},
      {"--seed", std::to_string(o.seed)},
      {"--no-broadcast-buffers", flag(!o.broadcast_buffers)},
      {"--no-comm", flag(o.no_comm)},
      {"--comm-only", flag(o.comm_only)},
      {"--bucket-cap-mb", cap},
      {"--nan-at-step", o.nan_at_step >= 0 ? std::to_string(o.nan_at_step) : "off"},
  };
  return r;
}

bool OnDevice(const ddp::ProcessGroup& group) { return std::strcmp(group.backend(), "nccl") == 0; }

// The mean of every rank's loss (one small all-reduce, on loss steps only).
StatusOr<float> MeanLoss(ddp::ProcessGroup& group, float loss) {
  StatusOr<float> sum = loss;
#ifdef DDPRUN_HAVE_CUDA
  if (OnDevice(group)) sum = AllReduceSumOnDevice(group, loss);
#endif
  if (!OnDevice(group)) {
    Status s = group.AllReduce(ddp::View(&loss, 1), ddp::ReduceOp::kSum)->Wait();
    sum = s.ok() ? StatusOr<float>(loss) : StatusOr<float>(s);
  }
  if (!sum.ok()) return sum.status().Annotate("all-reduce the loss");
  return *sum / static_cast<float>(group.size());
}

template <typename Model>
Status Backward(Rank<Model>& r, long step) {
  const int rank = r.group.rank();
  const long nan_index =
      InjectsNan(r.options, rank, r.group.size(), step) ? r.model.IndexOf(kNanParameter) : -1;
  r.model.ZeroGrads();
  const auto t0 = std::chrono::steady_clock::now();
  if (r.options.no_comm) {
    r.model.Backward(r.updater.loss_scale(), [](size_t) {});
    if (r.options.time) r.backward_us.push_back(MicrosSince(t0));
    return r.model.TakeError();
  }
  r.reducer.BeginBackward();
  r.model.Backward(r.updater.loss_scale(), [&](size_t i) {
    if (static_cast<long>(i) == nan_index) r.model.SetGradNan(i);
    r.reducer.MarkGradReady(i);
  });
  if (r.options.time) r.backward_us.push_back(MicrosSince(t0));
  Status s = r.reducer.FinishBackward();
  if (s.ok()) s = r.model.TakeError();
  if (!s.ok()) return s.Annotate("step " + std::to_string(step) + ": backward");
  FollowGradStorage(r);
  const std::string notice = r.reducer.TakeNotice();
  if (!notice.empty() && rank == 0) std::fprintf(stderr, "train: rank 0: %s\n", notice.c_str());
  return Status::Ok();
}

// --comm-only: the collectives of a step (buffers, the gradient buckets in
// backward's order, the loss on loss steps) with no forward, backward or update.
template <typename Model>
Status RunCommOnlyStep(Rank<Model>& r, long step) {
  Status s = r.reducer.BeforeForward();
  if (!s.ok()) return s.Annotate("step " + std::to_string(step) + ": broadcast buffers");
  const auto t0 = std::chrono::steady_clock::now();
  r.reducer.BeginBackward();
  for (size_t l = r.model.parameters().size() / 2; l-- > 0;) {
    r.reducer.MarkGradReady(2 * l);
    r.reducer.MarkGradReady(2 * l + 1);
  }
  if (r.options.time) r.backward_us.push_back(MicrosSince(t0));
  s = r.reducer.FinishBackward();
  if (!s.ok()) return s.Annotate("step " + std::to_string(step) + ": backward");
  if (!IsLossStep(step, r.options.steps)) return Status::Ok();
  return MeanLoss(r.group, 0.0f).status();
}

template <typename Model>
Status RunStep(Rank<Model>& r, long step) {
  if (r.options.comm_only) return RunCommOnlyStep(r, step);
  const int rank = r.group.rank();
  ddp::Heartbeat();
  MaybeCrash(r.options, rank, step);
  if (Diverges(r.options, rank, step)) {
    if (Status d = MeanLoss(r.group, 0.0f).status(); !d.ok()) {
      return d.Annotate("step " + std::to_string(step) + ": diverging");
    }
  }
  Status s = r.options.no_comm ? Status::Ok() : r.reducer.BeforeForward();
  if (!s.ok()) return s.Annotate("step " + std::to_string(step) + ": broadcast buffers");
  r.data.Batch(SyntheticData::ShardStart(step, r.group.size(), rank, r.options.batch),
               r.options.batch, r.x.data(), r.y.data());
  r.model.Forward(r.x.data(), r.y.data(), r.options.batch);
  s = r.model.TakeError();
  if (!s.ok()) return s.Annotate("step " + std::to_string(step) + ": forward");
  MaybeHang(r.options, rank, step);
  s = Backward(r, step);
  if (!s.ok()) return s;
  if (IsLossStep(step, r.options.steps) && !r.options.no_comm) {
    StatusOr<float> mean = MeanLoss(r.group, r.model.Loss());  // the step's one host wait
    if (!mean.ok()) return mean.status().Annotate("step " + std::to_string(step));
    if (rank == 0) PrintLoss(step, *mean);
    if (Status finite = CheckLoss(step, *mean, r.options); !finite.ok()) return finite;
  }
  std::function<StatusOr<std::string>()> origin;
  if (FindsNonFiniteOrigin(r.options) && !r.options.no_comm) {
    origin = [&] { return r.reducer.NonFiniteOrigin(); };
  }
  return r.updater.Apply(step, rank == 0, origin);
}

StatusOr<std::unique_ptr<ddp::ProcessGroup>> Connect(const TrainOptions& o) {
  StatusOr<ddp::LaunchEnv> env = ddp::ReadLaunchEnv();
  if (!env.ok()) return env.status();
  const bool rank_fault = o.RankFault();
  if (rank_fault && o.hang_rank >= env->world_size) {
    return InvalidArgument(
        "--hang-rank " + std::to_string(o.hang_rank) + " is not a rank of this job (WORLD_SIZE " +
        std::to_string(env->world_size) + "): use 0 to " + std::to_string(env->world_size - 1));
  }
  if (o.collective_timeout_s > 0) {
    env->timeout = std::chrono::milliseconds(std::llround(o.collective_timeout_s * 1000));
  }
  ddp::Device device = ddp::Device::kCpu;
#ifdef DDPRUN_HAVE_CUDA
  if (o.device == "cuda") {
    // Before the group: the NCCL set-up publishes the current device.
    if (Status s = SelectDevice(env->local_rank); !s.ok()) {
      return s.Annotate("rank " + std::to_string(env->rank));
    }
    device = ddp::Device::kCuda;
  }
#endif
  StatusOr<std::unique_ptr<ddp::ProcessGroup>> group = ddp::CreateProcessGroup(*env, device);
  if (!group.ok()) return group.status().Annotate("rank " + std::to_string(env->rank));
  if (o.collective_timeout_s > 0) (*group)->set_timeout(env->timeout);
  return group;
}

std::string Times(const char* what, int rank, const std::vector<long>& us) {
  std::string line = "rank " + std::to_string(rank) + " " + what;
  for (size_t i = 0; i < us.size(); ++i) line += (i == 0 ? " " : ",") + std::to_string(us[i]);
  return line + "\n";
}

// --time: per-step and backward wall times (us), then ru_maxrss (KiB), in
// one write (the ranks share the launcher's stdout).
template <typename Model>
void PrintTiming(const Rank<Model>& r) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const std::string text = Times("step_us", r.group.rank(), r.step_us) +
                           Times("backward_us", r.group.rank(), r.backward_us) + "rank " +
                           std::to_string(r.group.rank()) + " maxrss_kb " +
                           std::to_string(usage.ru_maxrss) + "\n";
  PrintWhole(text);
}

// A set-up step that ran out of time under --collective-timeout: not a late
// rank's doing alone, the user's limit may be below any set-up's time (attack
// 98: 1 ms, and "rank(s) 1 did not arrive").
Status WithTimeoutNote(const TrainOptions& o, const Status& s) {
  if (o.collective_timeout_s <= 0 || (s.code() != StatusCode::kDeadlineExceeded &&
                                      s.message().find(" within ") == std::string::npos)) {
    return s;
  }
  return Status(s.code(), s.message() + "; --collective-timeout " +
                              FormatSeconds(o.collective_timeout_s) +
                              " s bounds the set-up and each of its store requests too: give it "
                              "more if the ranks start further apart or the store is slow");
}

int Fail(int rank, const Status& s) {
  std::fprintf(stderr, "train: rank %d: %s\n", rank, s.message().c_str());
  (void)ddp::RecordError("train: rank " + std::to_string(rank) + ": " + s.message());
  std::fflush(nullptr);
  return 1;
}

MlpConfig ModelConfig(const TrainOptions& o) {
  return MlpConfig{o.width, o.depth, o.unused_layer, o.amp, o.seed};
}

// Trains `model` on this rank's shards; `optimizer` as Updater's.
template <typename Model>
int Train(const TrainOptions& options, ddp::ProcessGroup& pg, Model& model,
          std::unique_ptr<Optimizer> optimizer) {
  StatusOr<std::unique_ptr<ddp::Reducer>> reducer =
      ddp::Reducer::Create(&pg, model.parameters(), model.buffers(), MakeReducerOptions(options));
  if (!reducer.ok()) {
    return Fail(pg.rank(),
                WithTimeoutNote(options, reducer.status().Annotate("create the reducer")));
  }
  Updater updater(options, &pg, &model.parameters(), std::move(optimizer));
  Rank<Model> r{options,
                pg,
                **reducer,
                model,
                updater,
                SyntheticData(options.seed),
                std::vector<float>(static_cast<size_t>(options.batch) * kInputDim),
                std::vector<float>(options.batch),
                {},
                {}};
  FollowGradStorage(r);
  for (long step = 0; step < options.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = RunStep(r, step);
    if (!s.ok()) return Fail(pg.rank(), s);
    if (options.time) r.step_us.push_back(MicrosSince(t0));
  }
  if (options.time) PrintTiming(r);
  const double checksum = model.Checksum();
  if (Status s = model.TakeError(); !s.ok()) return Fail(pg.rank(), s.Annotate("checksum"));
  PrintChecksum(("rank " + std::to_string(pg.rank())).c_str(), checksum);
  return 0;
}

#ifdef DDPRUN_HAVE_CUDA
int TrainOnDevice(const TrainOptions& options, ddp::ProcessGroup& pg) {
  StatusOr<std::unique_ptr<CudaMlp>> model = CudaMlp::Create(ModelConfig(options));
  if (!model.ok()) return Fail(pg.rank(), model.status());
  StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeCudaOptimizer(
      options.optimizer, options.lr, (*model)->parameters(), (*model)->HandOverHalfWeights());
  if (!optimizer.ok()) return Fail(pg.rank(), optimizer.status());
  return Train(options, pg, **model, std::move(*optimizer));
}
#endif

int TrainOn(const TrainOptions& options, ddp::ProcessGroup& pg) {
#ifdef DDPRUN_HAVE_CUDA
  if (options.device == "cuda") return TrainOnDevice(options, pg);
#endif
  const std::string who = "rank " + std::to_string(pg.rank());
  if (!OpenBlasHasRoom(who.c_str())) return 1;
  Mlp model(ModelConfig(options));
  return Train(options, pg, model, nullptr);
}

}  // namespace

int RunDistributed(const TrainOptions& options) {
  StatusOr<std::unique_ptr<ddp::ProcessGroup>> group = Connect(options);
  if (!group.ok()) {
    // In the error file too: the failure report quotes it (it said "no traceback").
    const std::string text = "train: " + WithTimeoutNote(options, group.status()).message();
    std::fprintf(stderr, "%s\n", text.c_str());
    (void)ddp::RecordError(text);
    return group.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const int rc = TrainOn(options, **group);
  // The teardown to come (the communicators' destruction) is held to --exit_timeout.
  ddp::Finishing();
  MaybeHangAtExit(options, (*group)->rank());
  return rc;
}

}  // namespace ddprun::train
