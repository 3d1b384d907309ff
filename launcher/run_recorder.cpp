#include "launcher/run_recorder.hpp"

#include <chrono>

#include <signal.h>
#include <spdlog/spdlog.h>

#include "base/exit_codes.hpp"
#include "supervisor/worker_spec.hpp"

namespace ddprun::launcher {
namespace {

using json = nlohmann::ordered_json;

json Ranks(const std::vector<int>& ranks) { return json(ranks); }

}  // namespace

Status RunRecorder::Start(const LaunchConfig& c, const std::string& program,
                          const std::string& host, const std::string& event_log_path,
                          bool in_slurm_job) {
  auto log = EventLog::Open(c.event_log_handler, event_log_path);
  if (!log.ok()) return log.status();
  events_ = std::move(*log);
  run_id_ = c.rdzv_id;
  program_ = program;
  host_ = host;
  max_restarts_ = c.max_restarts;
  slurm_ = c.slurm;
  in_slurm_job_ = in_slurm_job;
  events_.SetCommon("run_id", run_id_);
  events_.SetCommon("host", host_);
  events_.Emit("agent_started",
               {{"program", program_},
                {"nproc_per_node", c.nproc_per_node},
                {"nnodes", std::to_string(c.nnodes_min) + ":" + std::to_string(c.nnodes_max)},
                {"max_restarts", c.max_restarts},
                {"rdzv_backend", c.rdzv_backend}});
  return Status::Ok();
}

void RunRecorder::RoundComplete(const rendezvous::RoundResult& round,
                                const std::string& master_addr, int master_port) {
  node_rank_ = round.node_rank;
  events_.SetCommon("node_rank", node_rank_);
  json nodes = json::array();
  for (const auto& n : round.nodes) nodes.push_back({{"name", n.name}, {"nproc", n.nproc}});
  events_.Emit("rendezvous_complete", {{"round", round.round},
                                       {"world_size", round.world_size},
                                       {"base_rank", round.base_rank},
                                       {"restart_count", round.restart_count},
                                       {"nodes", nodes},
                                       {"master_addr", master_addr},
                                       {"master_port", master_port}});
  hang_.reset();
  workers_.clear();
}

void RunRecorder::Restart(int restart_count, int max_restarts) {
  events_.Emit("restart", {{"restart_count", restart_count}, {"max_restarts", max_restarts}});
}

void RunRecorder::WorkersStarted(const std::vector<supervisor::WorkerRecord>& workers) {
  json list = json::array();
  for (const auto& w : workers) {
    list.push_back({{"rank", w.rank}, {"local_rank", w.local_rank}, {"pid", w.pid}});
  }
  events_.Emit("workers_started", {{"workers", list}});
}

void RunRecorder::MembershipChange(const std::string& reason) {
  events_.Emit("membership_change", {{"reason", reason}});
}

void RunRecorder::WorkersExited(const std::vector<supervisor::WorkerRecord>& workers) {
  workers_ = workers;
}

void RunRecorder::Failure(const rendezvous::Cause& cause) {
  events_.Emit("failure", {{"class", rendezvous::FailureClassName(cause.cls)},
                           {"rank", cause.rank},
                           {"local_rank", cause.local_rank},
                           {"pid", cause.pid},
                           {"exit_code", cause.exit_code},
                           {"what", cause.what}});
}

void RunRecorder::Signal(int sig) {
  if (sig == signal_) return;  // told twice (the group, then the agent's exit)
  signal_ = sig;
  events_.Emit("signal", {{"signal", supervisor::SignalName(sig)}});
}

void RunRecorder::HangDetected(const supervisor::HangReport& report, const std::string& verdict) {
  HangFacts h;
  json hung = json::array();
  for (const auto& w : report.hung) {
    h.hung.push_back(w.rank);
    hung.push_back({{"rank", w.rank},
                    {"pid", w.pid},
                    {"silent_seconds", w.silent_seconds},
                    {"at_exit", w.finishing}});
  }
  h.verdict = verdict;
  hang_ = h;
  events_.Emit(
      "hang_detected",
      {{"hung", hung}, {"beating_ranks", Ranks(report.beating_ranks)}, {"verdict", verdict}});
}

void RunRecorder::DumpWritten(const std::string& dir, const std::vector<int>& stragglers) {
  if (hang_) {
    hang_->dump_dir = dir;
    hang_->stragglers = stragglers;
  }
  events_.Emit("dump_written", {{"dir", dir}, {"stragglers", Ranks(stragglers)}});
}

ExitClass RunRecorder::SignalClass(int sig) const {
  return in_slurm_job_ && sig == SIGTERM ? ExitClass::kPreempted : ExitClass::kSignalled;
}

ExitClass RunRecorder::Classify(const rendezvous::Action& exit, int exit_code) const {
  if (exit_code == 0) return ExitClass::kSucceeded;
  // Ended by the signal (its exit code, 128+N): the class says so, as the exit
  // code does, whatever failed before it (a hang being dumped, a failure
  // stopping); root_cause and hang still tell that (attack 116: "hang", 143).
  if (signal_ != 0 && exit_code == 128 + signal_) return SignalClass(signal_);
  if (exit.failed) {
    switch (exit.root_cause.cls) {
      case rendezvous::FailureClass::kWorker:
      case rendezvous::FailureClass::kPeer:
        return ExitClass::kWorkerFailure;
      case rendezvous::FailureClass::kHang:
      case rendezvous::FailureClass::kExitHang:
        return ExitClass::kHang;
      case rendezvous::FailureClass::kExitCrash:
        return ExitClass::kWorkerFailure;
      case rendezvous::FailureClass::kRendezvous:
        return ExitClass::kRendezvous;
      case rendezvous::FailureClass::kSignal:
        return signal_ != 0 ? SignalClass(signal_) : ExitClass::kSignalled;
    }
  }
  if (signal_ != 0) return SignalClass(signal_);
  if (exit_code == exit_code::kUsage) return ExitClass::kUsageError;
  if (exit.store_lost) return ExitClass::kRendezvous;
  return ExitClass::kLauncherError;
}

std::string RunRecorder::Finish(const rendezvous::Action& exit, int exit_code, int attempt,
                                const std::string& log_dir,
                                const std::vector<supervisor::FailureRecord>& failures,
                                const std::string& cause, const std::string& fix,
                                const std::optional<rendezvous::Cause>& unrecorded_root) {
  const ExitClass cls = Classify(exit, exit_code);
  std::string path;
  if (cls != ExitClass::kSucceeded && !log_dir.empty()) {
    IncidentFacts f;
    f.run_id = run_id_;
    f.program = program_;
    f.host = host_;
    f.log_dir = log_dir;
    f.node_rank = node_rank_;
    f.attempt = attempt;
    f.max_restarts = max_restarts_;
    f.exit_code = exit_code;
    f.exit_class = cls;
    f.message = exit.message;
    f.signal = signal_;
    if (exit.failed) {
      f.root_cause = exit.root_cause;
    } else if (unrecorded_root) {
      f.root_cause = *unrecorded_root;
    }
    f.failures = failures;
    f.workers = workers_;
    f.hang = hang_;
    f.cause = cause;
    f.fix = fix;
    if (slurm_) {
      f.slurm = json{{"job_id", slurm_->job_id},
                     {"step_id", slurm_->step_id},
                     {"node_name", slurm_->node_name},
                     {"restart_count", slurm_->restart_count}};
    }
    path = log_dir + "/incident.json";
    if (Status s = WriteJsonFile(path, IncidentJson(f)); !s.ok()) {
      spdlog::warn("incident.json not written: {}", s.message());
      path.clear();
    }
  }
  events_.Emit("exit", {{"exit_code", exit_code},
                        {"class", ExitClassName(cls)},
                        {"message", exit.message},
                        {"incident", path.empty() ? json(nullptr) : json(path)}});
  // A reader that is behind gets a moment to take the rest, the exit event among it.
  events_.Flush(std::chrono::seconds(2), std::chrono::seconds(10));
  return path;
}

}  // namespace ddprun::launcher
