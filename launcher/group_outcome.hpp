// What the agent makes of a finished worker group and of the files a run
// keeps: helpers of launcher/agent.cpp, free of its state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/environ.hpp"
#include "launcher/launch_config.hpp"
#include "supervisor/failure_report.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::launcher {

// Whether -r/-t/--duplicate_*_filters asked for files that must outlive the run.
bool WritesLogFiles(const LaunchConfig& c);

// Logs each worker ddprun stopped, and each it had to abandon after SIGKILL.
void LogStopped(const supervisor::GroupResult& r);

// After a group whose workers wrote their own output into log files under
// `run_dir` (--redirects; "" for none): warns when that filesystem is full,
// since their failed writes are lost without anyone seeing them.
void WarnIfFull(const std::string& run_dir);

// Where torch's agent puts the file timer's pipe when TORCHELASTIC_TIMER_FILE
// is unset: <tempdir>/watchdog_timer_<uuid4>.
std::string DefaultTimerFile(const env::Environ& environ);

// A hang where no worker ever beat: the ranks not connected to the
// job's store (port `store_port`, where MASTER_PORT leads) while the others
// did and wait there, logged as the ones that never joined; empty (nothing
// logged) when it cannot tell them apart.
std::vector<int> TellNeverJoined(const supervisor::HangReport& report, int store_port);

// The failure report's host: the host name, the node rank (-1: none yet)
// and, under Slurm, the node, the job step and the requeues so far.
std::string ReportHost(int node_rank, const std::optional<env::SlurmStep>& slurm);

}  // namespace ddprun::launcher
