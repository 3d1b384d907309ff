// The agent's run as machines read it (launcher/machine_reports.hpp): each
// event of the agent goes to the event log as it happens, and what the end of
// a failed or stopped run needs (the last attempt's workers, the hang, the
// signal) is kept for incident.json. The agent calls one method per event.
// Not thread-safe: the agent's thread only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/event_log.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/machine_reports.hpp"
#include "rendezvous/agent_machine.hpp"
#include "rendezvous/rendezvous.hpp"
#include "supervisor/hang_check.hpp"

namespace ddprun::launcher {

class RunRecorder {
 public:
  RunRecorder() = default;
  // Opens the event log (--event_log_handler, DDPRUN_EVENT_LOG) and says
  // "agent_started". Fails on a log that cannot be opened. `in_slurm_job`: a
  // SIGTERM then ends the run as "preempted".
  Status Start(const LaunchConfig& c, const std::string& program, const std::string& host,
               const std::string& event_log_path, bool in_slurm_job);

  void RoundComplete(const rendezvous::RoundResult& round, const std::string& master_addr,
                     int master_port);
  void Restart(int restart_count, int max_restarts);
  void WorkersStarted(const std::vector<supervisor::WorkerRecord>& workers);
  void MembershipChange(const std::string& reason);
  // The group ended: its workers are kept for the incident.
  void WorkersExited(const std::vector<supervisor::WorkerRecord>& workers);
  void Failure(const rendezvous::Cause& cause);
  void Signal(int sig);
  void HangDetected(const supervisor::HangReport& report, const std::string& verdict);
  void DumpWritten(const std::string& dir, const std::vector<int>& stragglers);

  // The end: the exit event and, unless the run succeeded or `log_dir` is ""
  // (logs to /dev/null), <log_dir>/incident.json. `failures` are this node's,
  // root cause first; cause/fix the catalogue's explanation of it. Returns
  // incident.json's path ("" when none was written). `unrecorded_root`: the
  // root cause this node reported where the job record holds none (a signal
  // ended the job while this node's failure was being handled, a restart
  // left for it).
  std::string Finish(const rendezvous::Action& exit, int exit_code, int attempt,
                     const std::string& log_dir,
                     const std::vector<supervisor::FailureRecord>& failures,
                     const std::string& cause, const std::string& fix,
                     const std::optional<rendezvous::Cause>& unrecorded_root = std::nullopt);

 private:
  ExitClass Classify(const rendezvous::Action& exit, int exit_code) const;
  ExitClass SignalClass(int sig) const;

  EventLog events_;
  std::string run_id_, program_, host_;
  int max_restarts_ = 0;
  int node_rank_ = -1;
  std::optional<env::SlurmStep> slurm_;
  bool in_slurm_job_ = false;
  std::vector<supervisor::WorkerRecord> workers_;
  std::optional<HangFacts> hang_;
  int signal_ = 0;
};

}  // namespace ddprun::launcher
