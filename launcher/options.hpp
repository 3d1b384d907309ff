// Turning ddprun's command line (and PET_* variables) into a LaunchConfig,
// with torchrun's validation rules and messages that name the option, the
// value and what is accepted.
#pragma once

#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/environ.hpp"
#include "env/gpus.hpp"
#include "launcher/completion.hpp"
#include "launcher/launch_config.hpp"

namespace ddprun::launcher {

// Host facts the options depend on (injected so tests need no GPU).
struct HostCounts {
  int cpus = 1;
  env::GpuInventory gpus;  // env::DiscoverGpus
};

enum class Action { kRun, kHelp, kVersion, kPrintCompletion };

struct ParsedCommandLine {
  Action action = Action::kRun;
  Shell completion_shell = Shell::kBash;  // with kPrintCompletion
  LaunchConfig config;
  std::vector<std::string> notices;   // one-line notes for the log (ignored options etc.)
  std::vector<std::string> warnings;  // one-line warnings for the log (GPUs not checked etc.)
};

// LOGLEVEL, in any case: TRACE, DEBUG, INFO, WARNING (or WARN), ERROR,
// CRITICAL or OFF; unset or empty is INFO. Returns the level's lower-case
// name as spdlog spells it ("warning"); an unknown level is kInvalidArgument.
StatusOr<std::string> LogLevelName(const env::Environ& environ);

// `args` excludes argv[0]. Errors are kInvalidArgument (usage) or
// kUnimplemented (an option ddprun does not support yet); both exit 2.
StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const env::Environ& environ, const HostCounts& host);

}  // namespace ddprun::launcher
