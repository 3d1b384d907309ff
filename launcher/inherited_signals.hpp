// Signals ignored when ddprun started stay ignored, as for any program that
// respects its caller: `nohup ddprun ...` (SIGHUP ignored) keeps training
// when the terminal or the SSH session it came from goes away, and a
// script's `ddprun ... &` (SIGINT and SIGQUIT ignored) is not stopped by a
// Ctrl-C meant for the script's foreground. torchrun handles them anyway and
// stops the job.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "launcher/launch_config.hpp"

namespace ddprun::launcher {

// Takes the signals of the default --signals_to_handle that were ignored at
// start (`ignored_at_start`, supervisor::IgnoredSignals) out of the handled
// ones, unless --signals_to_handle named them; returns a notice for each.
// Sets c.workers_ignore: the signals ignored at start that ddprun does not
// handle, but SIGPIPE and SIGXFSZ, which workers get back at their default
// (as Python's subprocess gives them).
std::vector<std::string> KeepSignalsIgnored(const std::set<int>& ignored_at_start, LaunchConfig& c);

}  // namespace ddprun::launcher
