// A node of a multi-node job whose agent cannot start (its program is
// missing on that node, a limit it cannot raise, a CPU list it cannot bind):
// the other nodes would wait out join_timeout for it (15 minutes in a Slurm
// step, whose task never comes back). The agent tells the job record instead,
// so that every node fails at once, naming this node and why.
#pragma once

#include <string>

#include "env/environ.hpp"
#include "launcher/launch_config.hpp"

namespace ddprun::launcher {

// Records in the job's store that this node cannot start, for `why` (what
// ddprun printed), with `exit_code` as the job's. Only for a job of a fixed
// number of nodes (static, or c10d with --nnodes N or N:N: an elastic job may
// run without this node), and only while no round runs (a round that formed
// without this node goes on). Waits for the store up to its start timeout, at
// most a minute; the node that would host the store (static: node rank 0;
// c10d: is_host, or the one that can bind the endpoint) serves it until every
// other node has read the record and left, at most a minute. Says what it did
// on stderr. Best effort: a store that cannot be reached leaves the others to
// their timeout.
void TellJobOfStartFailure(const LaunchConfig& config, const env::Environ& environ,
                           const std::string& why, int exit_code);

}  // namespace ddprun::launcher
