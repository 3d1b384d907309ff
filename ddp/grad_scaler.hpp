// Mixed-precision loss scaling, as torch.amp.GradScaler, made safe under
// data parallelism: Unscale() multiplies every gradient by 1/scale and finds
// inf/NaN in one pass (a fused kernel on CUDA); the found-inf flag is agreed
// across ranks (all-reduce MAX) so every rank skips the same step;
// ClipGradNorm() clips by the norm of the *unscaled*, already reduced gradients; Update()
// follows PyTorch's rule (backoff 0.5 on inf, growth 2 after 2000 good steps,
// never to inf). An anomaly mode names the first parameters whose gradients
// became non-finite, with the step. Gradients must be float32 (16-bit ones are
// refused as not supported yet).
//
// Not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "base/status.hpp"
#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"

namespace ddprun::ddp {

struct GradScalerOptions {
  float init_scale = 65536.0f;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int growth_interval = 2000;
  bool anomaly_mode = false;
};

class GradScaler {
 public:
  GradScaler(ProcessGroup* group, GradScalerOptions options);

  float scale() const { return scale_; }
  float ScaleLoss(float loss) const { return loss * scale_; }

  // Unscales every parameter's gradient in place and agrees with the other
  // ranks whether any was inf/NaN. REQUIRES: once per step, after backward.
  Status Unscale(std::vector<Parameter>& params, long step);
  bool found_inf() const { return found_inf_; }
  // The anomaly report of the last Unscale (names, step), or "".
  const std::string& anomaly() const { return anomaly_; }

  // Clips to `max_norm` over the L2 norm of all gradients; returns the norm
  // before clipping. Under DDP the reduced gradients are the same on every
  // rank, so this norm is the global one. REQUIRES: after Unscale.
  StatusOr<float> ClipGradNorm(std::vector<Parameter>& params, float max_norm);

  // Whether the optimizer may step (no inf/NaN anywhere), then the scale update.
  bool ShouldStep() const { return !found_inf_; }
  void Update();

 private:
  ProcessGroup* group_;
  GradScalerOptions options_;
  float scale_;
  int growth_tracker_ = 0;
  bool found_inf_ = false;
  bool unscaled_ = false;
  std::string anomaly_;
};

}  // namespace ddprun::ddp
