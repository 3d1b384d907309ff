// A process group of one rank, in process: every collective completes at
// once and leaves its tensor as it is. The --reference run uses it so the
// GradScaler works the same way as under DDP, with nothing to agree with.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddp/process_group.hpp"

namespace ddprun::train {

class LocalGroup : public ddp::ProcessGroup {
 public:
  LocalGroup() : ProcessGroup(0, 1, "local") {}

  std::shared_ptr<ddp::Work> AllReduce(ddp::TensorView t, ddp::ReduceOp op) override;
  std::shared_ptr<ddp::Work> Broadcast(ddp::TensorView t, int root) override;
  StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& mine) override;
  uint64_t sequence() const override { return sequence_; }

 private:
  std::shared_ptr<ddp::Work> Done();
  uint64_t sequence_ = 0;
};

}  // namespace ddprun::train
