// The agent's class, for the files that define its parts: agent.cpp (the
// rounds, the outcome, the end) and agent_hang.cpp (what a hang or a dump
// request does). Internal to the launcher: RunAgent (agent.hpp) is its use.
//
// Not thread-safe: the agent's thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "env/environ.hpp"
#include "env/log_layout.hpp"
#include "env/worker_env.hpp"
#include "launcher/failure_facts.hpp"
#include "launcher/job_stores.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/program.hpp"
#include "launcher/run_recorder.hpp"
#include "launcher/torch_hook.hpp"
#include "rendezvous/agent_driver.hpp"
#include "rendezvous/coordinator.hpp"
#include "rendezvous/pause_board.hpp"
#include "supervisor/debug_dump.hpp"
#include "supervisor/failure_report.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::launcher::internal {

// The agent's state for one launcher run: it carries out what the
// rendezvous machine (rendezvous/agent_machine.hpp) decides.
class Agent {
 public:
  Agent(const LaunchConfig& c, const Program& p, const env::Environ& e)
      : c_(c), program_(p), environ_(e) {}

  int Run();

 private:
  Status Setup();
  // torch's file timer server, when TORCHELASTIC_ENABLE_FILE_TIMER=1.
  Status ServeFileTimer();
  env::GroupInfo Group(const rendezvous::RoundResult& round) const;
  std::string NcclRasAddr();
  // The supervisor's hang and dump-request handlers (agent_hang.cpp).
  void HandleHangs();
  // Runs one round's workers and tells the machine what they did; an exit
  // code when the agent must stop at once (a usage error, no log directory).
  std::optional<int> RunRound(const rendezvous::RoundResult& round);
  // Several nodes: the board on which this node tells its stopped workers and
  // reads the others' (wired into the supervisor); nullptr for one node.
  std::unique_ptr<rendezvous::PauseBoard> PausesAcrossNodes(const rendezvous::RoundResult& round);
  rendezvous::WorkersOutcome Outcome(const rendezvous::RoundResult& round,
                                     const supervisor::GroupResult& result);
  // A worker's own exit failed the group (Supervisor::SetFailureHandler): with
  // other nodes in the round, the job record hears of it now, not after the
  // others' grace (AgentMachine::FailedEarly).
  void FailedEarly(const supervisor::GroupResult& so_far);
  // The cause of `root` as the job record keeps it (class aside).
  static rendezvous::Cause CauseOf(const supervisor::FailureRecord& root);
  void NoteHiddenOutput(std::vector<supervisor::FailureRecord>& failures) const;
  int Finish(const rendezvous::Action& exit);
  // The terminating signal to act on; with `after`, only one received after
  // the first `after` (Supervisor::signals_received()).
  rendezvous::AgentDriver::SignalQuery PendingSignal(int after = -1);
  int FinishLocally(int code, const std::string& message);
  std::vector<std::string> ErrorFiles(int attempt) const;
  // Dumps every running worker into `dir` and prints the summary; returns the
  // ranks the flight recorders show as stragglers.
  std::vector<int> DumpWorkers(const supervisor::HangReport& report, const std::string& dir);
  // How long a failure that another node's may have caused waits before it is
  // recorded: long enough for the coordinator to find a lost node (keep-alive
  // limit plus one beat), and for that node's agent to record its own cause.
  std::chrono::milliseconds PeerSettle() const {
    const auto& s = stores_.settings;
    return std::min(s.KeepAliveLimit() + s.keep_alive_interval, s.kLongestWait);
  }
  // What the catalogue may name beyond the worker's text (supervisor/explain.hpp).
  supervisor::ExplainContext ExplainFacts() const {
    return facts_.Context(c_, program_, environ_, layout_ ? layout_->run_dir() : "");
  }
  // This node's failure report, with the root cause explained where the catalogue knows it.
  std::string Report() const;

  const LaunchConfig& c_;
  const Program& program_;
  const env::Environ& environ_;
  std::optional<env::LogLayout> layout_;
  std::unique_ptr<supervisor::Supervisor> sup_;
  JobStores stores_;
  std::unique_ptr<rendezvous::AgentDriver> driver_;
  bool store_unreached_ = false;  // the rendezvous store could not be reached at the start
  std::optional<rendezvous::RoundResult> round_;  // the round running now, or last
  std::unique_ptr<rendezvous::Coordinator> coordinator_;
  supervisor::GroupOptions options_;
  // This node's failures in its last failed round, root cause first.
  std::vector<supervisor::FailureRecord> local_failures_;
  bool last_group_failed_ = false;  // the last group's outcome (local_failures_ are its)
  FailureFacts facts_;              // for the diagnosis of a failure (supervisor/explain.hpp)
  // Log files a failed write left incomplete, over all rounds.
  std::vector<std::string> lost_logs_;
  std::string timer_file_;      // the file timer's pipe, "" when not served
  TorchHookDir torch_hook_;     // --hang_detect=torch: where the hook is written
  std::string torch_hook_dir_;  // ... for the round running now ("" none)
  // The ranks of the round looked at for a Python that runs without the hook:
  // found, or their hook made a process group. Looked at every kHookLook.
  std::set<int> hook_looked_;
  std::chrono::steady_clock::time_point next_hook_look_{};
  static constexpr std::chrono::seconds kHookLook{2};
  void LookForHooklessPythons(const std::vector<supervisor::WorkerRecord>& workers);
  // Those of `targets` whose hook made no process group (in `torch_dir`) and
  // whose Python runs without the hook, said for a verdict ("" when none).
  std::string HooklessRanks(const std::string& torch_dir,
                            const std::vector<supervisor::DumpTarget>& targets) const;
  std::string nccl_ras_addr_;  // --hang_detect=torch: the job's NCCL_RAS_ADDR, "" for none
  // The round's hang dump found every local rank waiting inside one collective.
  bool hang_all_waiting_ = false;
  RunRecorder record_;  // events and incident.json
};

}  // namespace ddprun::launcher::internal
