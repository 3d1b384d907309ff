#include "examples/train/updater.hpp"

#include <cstdio>
#include <string>
#include <utility>

namespace ddprun::train {
namespace {

constexpr float kMaxGradNorm = 1.0f;

}  // namespace

Updater::Updater(const TrainOptions& options, ddp::ProcessGroup* group,
                 std::vector<ddp::Parameter>* params, std::unique_ptr<Optimizer> optimizer)
    : clip_(options.clip),
      params_(params),
      optimizer_(optimizer ? std::move(optimizer)
                           : MakeOptimizer(options.optimizer, options.lr, *params)) {
  if (options.UseScaler()) {
    ddp::GradScalerOptions scaler_options;
    scaler_options.anomaly_mode = true;
    if (options.amp != Precision::kFloat16) {
      // bf16 (or fp32 with --clip or --nan-at-step) has fp32's range: no loss
      // scaling, as PyTorch trains bf16 without a GradScaler; the scaler still
      // finds inf/NaN and every rank skips that step alike.
      scaler_options.init_scale = 1.0f;
      scaler_options.growth_factor = 1.0f;
      scaler_options.backoff_factor = 1.0f;
    }
    scaler_.emplace(group, scaler_options);
  }
}

Status Updater::Apply(long step, bool report,
                      const std::function<StatusOr<std::string>()>& origin) {
  if (!scaler_) {
    optimizer_->Step(*params_);
    return optimizer_->TakeError().Annotate("optimizer step " + std::to_string(step));
  }
  Status s = scaler_->Unscale(*params_, step);
  if (!s.ok()) return s.Annotate("unscale gradients at step " + std::to_string(step));
  std::string anomaly = scaler_->anomaly();
  if (origin && scaler_->found_inf()) {
    StatusOr<std::string> from = origin();
    if (!from.ok()) return from.status().Annotate("step " + std::to_string(step));
    anomaly += from->empty()
                   ? ", after the all-reduce; no rank had any before it: the sum overflowed"
                   : ", after the all-reduce; made by " + *from + " before it";
  }
  if (report && !anomaly.empty()) std::printf("%s\n", anomaly.c_str());
  if (clip_) {
    StatusOr<float> norm = scaler_->ClipGradNorm(*params_, kMaxGradNorm);
    if (!norm.ok()) return norm.status().Annotate("clip gradients at step " + std::to_string(step));
  }
  const bool stepped = scaler_->ShouldStep();
  if (stepped) optimizer_->Step(*params_);
  s = optimizer_->TakeError();
  if (!s.ok()) return s.Annotate("optimizer step " + std::to_string(step));
  scaler_->Update();
  if (report && !stepped) {
    std::printf("step %ld: skipped (inf/NaN gradients), scale %g\n", step, scaler_->scale());
  }
  return Status::Ok();
}

}  // namespace ddprun::train
