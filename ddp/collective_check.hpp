// TORCH_DISTRIBUTED_DEBUG=DETAIL for the DDP core: before each collective,
// every rank's description of it (operation, reduce op or root, dtype, count,
// sequence number) is gathered through the store and compared, as PyTorch's
// ProcessGroupWrapper does. Ranks whose programs diverged (one all-reduces
// where another broadcasts, or sizes differ) then fail at once, each naming
// what every rank was about to run, instead of hanging inside a collective
// or corrupting memory. It costs a store round trip per collective and
// blocks the caller until every rank has reached the same collective: a
// debugging aid, off by default.
#pragma once

#include <memory>
#include <string>

#include "ddp/process_group.hpp"

namespace ddprun::ddp {

// Whether TORCH_DISTRIBUTED_DEBUG asks for the check (DETAIL; OFF and INFO
// do not). An unknown value is an error naming the accepted ones.
StatusOr<bool> CollectiveCheckRequested();

// `inner` with each AllReduce and Broadcast checked first.
std::unique_ptr<ProcessGroup> WithCollectiveCheck(std::unique_ptr<ProcessGroup> inner);

// "allreduce(sum) of 1024 float32 (#5)": one rank's side, as gathered.
std::string DescribeCollective(uint64_t seq, const char* op, const TensorView& t,
                               const std::string& detail);

}  // namespace ddprun::ddp
