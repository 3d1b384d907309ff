// The agent loop of one node: compute the attempt's worker environments,
// start and supervise the group, then decide: done, restart, or give up
// with torchrun's failure report. Returns the launcher's exit code.
#pragma once

#include "env/environ.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/program.hpp"

namespace ddprun::launcher {

int RunAgent(const LaunchConfig& config, const Program& program, const env::Environ& environ);

}  // namespace ddprun::launcher
