// One attempt's WorkerSpecs: argv, environment and output routing per local
// rank, from the config (-r, -t, --local_ranks_filter, duplicate filters and
// the line prefix template).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.hpp"
#include "env/log_layout.hpp"
#include "env/worker_env.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/program.hpp"
#include "supervisor/worker_spec.hpp"

namespace ddprun::launcher {

StatusOr<std::vector<supervisor::WorkerSpec>> BuildWorkerSpecs(const LaunchConfig& config,
                                                               const Program& program,
                                                               const env::GroupInfo& group,
                                                               const env::LogLayout& layout,
                                                               const env::Environ& environ);

// Python's string.Template.safe_substitute: $name and ${name} of `values`
// replaced, $$ made $, anything else kept as written.
std::string SafeSubstitute(const std::string& text,
                           const std::vector<std::pair<std::string, std::string>>& values);

// The tee prefix: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (unset or empty: the
// default "[${role_name}${local_rank}]:"), as torchrun substitutes it
// (SafeSubstitute) with role_name, rank, local_rank, and ddprun's host.
std::string LinePrefix(const std::string& tmpl, const std::string& role, int rank, int local_rank,
                       const std::string& host);

// torchrun's argument macro (torch.distributed.elastic.utils.macros): in each
// argument after the executable, $local_rank and ${local_rank} become the
// worker's local rank and $$ becomes $, as Python's string.Template
// safe_substitute does; any other $ stays as it is.
std::string SubstituteLocalRank(const std::string& arg, int local_rank);

}  // namespace ddprun::launcher
