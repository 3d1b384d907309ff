// Slurm mode (--slurm): inside a job step, what the step says fills in the
// options the user did not give, and the classic mistakes are refused.
#pragma once

#include "base/status.hpp"
#include "env/environ.hpp"
#include "launcher/options.hpp"
#include "launcher/raw_options.hpp"

namespace ddprun::launcher {

// Reads the step (env/slurm.hpp) unless --slurm=off; sets defaults in `raw`,
// parsed.config.slurm and from_slurm, and one notice saying what came from
// the step. kInvalidArgument for several agents per node, an --nnodes the
// step does not have, or --slurm=node outside a step.
Status ApplySlurm(RawOptions& raw, const env::Environ& environ, ParsedCommandLine& parsed);

}  // namespace ddprun::launcher
