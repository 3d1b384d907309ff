// Where inf/NaN gradients came from. After the all-reduce every rank holds
// the same sum, so a non-finite value is everywhere and its origin is lost;
// checked as each gradient becomes ready (before the reduction), and the
// ranks' findings gathered, it is known: which ranks, which parameters.
//
// Host memory only. Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "base/status.hpp"
#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"

namespace ddprun::ddp {

// Whether every element of the parameter's gradient (host memory; float32,
// float16 or bfloat16 as its dtype) is finite.
bool GradFinite(const Parameter& p);

// Collective (every rank calls it at the same point): `mine`, this rank's
// parameter names with non-finite gradients before the reduction, gathered.
// "rank 1 (layers.1.weight); rank 3 (head.bias)", or "" when no rank had
// any: the values became non-finite in the reduction (the sum overflowed).
StatusOr<std::string> GatherNonFiniteOrigin(ProcessGroup& group,
                                            const std::vector<std::string>& mine);

}  // namespace ddprun::ddp
