// Slurm mode (--slurm): inside a job step, what the step says fills in the
// options the user did not give, and the classic mistakes are refused.
#pragma once

#include "base/status.hpp"
#include "env/environ.hpp"
#include "launcher/options.hpp"
#include "launcher/raw_options.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::launcher {

// Reads the step (env/slurm.hpp) unless --slurm=off; sets defaults in `raw`,
// parsed.config.slurm and from_slurm, and one notice saying what came from
// the step. kInvalidArgument for several agents per node, an --nnodes the
// step does not have, or --slurm=node outside a step.
Status ApplySlurm(RawOptions& raw, const env::Environ& environ, ParsedCommandLine& parsed);

// A store host taken from the step is a Slurm node name; where it does not
// resolve here (NodeName=n1 NodeAddr=10.1.0.1), Slurm's NodeAddr stands in
// (c.master_addr or c.rdzv_endpoint rewritten). Returns what to tell the user
// ("" when nothing changed); kInvalidArgument when neither resolves.
StatusOr<std::string> ResolveSlurmStoreHost(LaunchConfig& c);

// The supervisor's filter for SIGUSR1/SIGUSR2 in a step whose proctrack plugin
// reaches every descendant (c.slurm_proctrack): one sent by the step's own
// slurmstepd (scancel -s, srun) reached the workers already, so ddprun does not
// send a second copy (logged once per signal). Empty (forward everything)
// outside a step, under proctrack/pgid or an unknown plugin, and under
// proctrack/cgroup when the workers are in a cgroup of ddprun's own
// (`own_cgroup`), where Slurm's reach is not certain.
supervisor::Supervisor::SignalFilter SlurmSignalFilter(const LaunchConfig& c, bool own_cgroup);

}  // namespace ddprun::launcher
