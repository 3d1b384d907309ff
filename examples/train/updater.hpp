// The update half of a training step, the same for the DDP run and the
// --reference run: with the GradScaler (AMP, --nan-at-step or --clip) it
// unscales the gradients, agrees with every rank on inf/NaN, clips, steps the
// optimizer only when no rank saw inf/NaN, and updates the scale; without it,
// it just steps the optimizer. Only fp16 scales the loss (65536 at first);
// bf16 and fp32 keep the scale at 1.
//
// Not thread-safe; `group` and `params` must outlive the Updater.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/grad_scaler.hpp"
#include "examples/train/optimizer.hpp"
#include "examples/train/options.hpp"

namespace ddprun::train {

class Updater {
 public:
  // `optimizer` steps `params` (nullptr: the host optimizer of `options`).
  Updater(const TrainOptions& options, ddp::ProcessGroup* group,
          std::vector<ddp::Parameter>* params, std::unique_ptr<Optimizer> optimizer = nullptr);

  // What the loss is multiplied by before backward (1 without the scaler).
  float loss_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }

  // Applies step `step`'s (reduced) gradients. With `report`, prints a
  // skipped step and the scaler's anomaly report. `origin`, when given, is
  // called on a step with inf/NaN (on every rank alike: the scaler agreed) and
  // says which ranks made them (ddp::Reducer::NonFiniteOrigin).
  Status Apply(long step, bool report,
               const std::function<StatusOr<std::string>()>& origin = nullptr);

 private:
  bool clip_;
  std::vector<ddp::Parameter>* params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<ddp::GradScaler> scaler_;
};

}  // namespace ddprun::train
