// The trainer's CUDA device set-up and the one host value it reduces over
// NCCL. Compiled only in a DDPRUN_HAVE_CUDA build; needs no CUDA headers.
#pragma once

#include "base/status.hpp"
#include "ddp/process_group.hpp"

namespace ddprun::train {

// Makes device `local_rank` current (ddprun's LOCAL_RANK: one device per
// local rank). InvalidArgument, naming CUDA_VISIBLE_DEVICES and what to do,
// when no device is visible or local_rank is not below the device count.
Status SelectDevice(int local_rank);

// The sum of `value` over the ranks of an NCCL `group`, through a device
// scalar (NCCL reduces device memory only). Blocks until done.
StatusOr<float> AllReduceSumOnDevice(ddp::ProcessGroup& group, float value);

}  // namespace ddprun::train
