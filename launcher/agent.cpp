#include "launcher/agent.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <optional>

#include "base/exit_codes.hpp"
#include "env/cpus.hpp"
#include "env/host.hpp"
#include "env/limits.hpp"
#include "env/log_layout.hpp"
#include "env/names.hpp"
#include "env/worker_env.hpp"
#include "launcher/agent_impl.hpp"
#include "launcher/failure_facts.hpp"
#include "launcher/group_outcome.hpp"
#include "launcher/job_stores.hpp"
#include "launcher/run_recorder.hpp"
#include "launcher/slurm_options.hpp"
#include "launcher/torch_hook.hpp"
#include "launcher/worker_specs.hpp"
#include "rendezvous/agent_driver.hpp"
#include "rendezvous/coordinator.hpp"
#include "supervisor/console.hpp"
#include "supervisor/explain.hpp"
#include "supervisor/failure_report.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::launcher {

namespace {

constexpr std::chrono::seconds kExitWait{30};
constexpr std::chrono::seconds kLeaveWait{5};

}  // namespace

namespace internal {

Status Agent::Setup() {
  if (Status s = record_.Start(c_, program_.name, env::Fqdn(),
                               env::Lookup(environ_, env::kEventLog).value_or(""),
                               env::Lookup(environ_, "SLURM_JOB_ID").has_value());
      !s.ok()) {
    return s;
  }
  std::string node;
  if (c_.slurm) {
    node = "node" + std::to_string(c_.slurm->node_id) +
           (c_.slurm->node_name.empty() ? "" : "-" + c_.slurm->node_name);
  }
  auto layout = env::LogLayout::Create(c_.log_dir, c_.rdzv_id, node);
  if (!layout.ok()) return layout.status();
  layout_ = std::move(*layout);
  const auto cgroup = env::Lookup(environ_, env::kCgroup).value_or("1");
  if (cgroup != "0" && cgroup != "1") {
    return InvalidArgument(std::string(env::kCgroup) + "=" + cgroup +
                           ": must be 0 (contain workers by their environment only) or 1 "
                           "(a cgroup of the job's own where one can be made; the default)");
  }
  auto sup = supervisor::Supervisor::Create(c_.handled_signals, cgroup == "1");
  if (!sup.ok()) return sup.status();
  sup_ = std::move(*sup);
  sup_->SetWorkersIgnore(c_.workers_ignore);
  spdlog::debug("workers and every process they start are contained by {}",
                sup_->DescribeContainment());
  if (Status s = ServeFileTimer(); !s.ok()) return s;
  options_.shutdown_timeout = supervisor::Duration(c_.shutdown_timeout);
  options_.hang_timeout = supervisor::Duration(c_.hang_timeout);
  options_.startup_timeout = supervisor::Duration(c_.startup_timeout);
  options_.exit_timeout = supervisor::Duration(c_.exit_timeout);
  options_.progress_from_output = c_.hang_detect_output;
  options_.forward_only = sup_->forward_only();
  if (auto filter = SlurmSignalFilter(c_, sup_->OwnCgroup())) sup_->SetSignalFilter(filter);
  HandleHangs();
  sup_->SetFailureHandler([this](const supervisor::GroupResult& so_far) { FailedEarly(so_far); });
  std::vector<std::string> notices;
  auto stores = OpenJobStores(c_, environ_, &notices);
  for (const auto& n : notices) spdlog::info("{}", n);
  if (!stores.ok()) return stores.status();
  stores_ = std::move(*stores);
  if (stores_.rdzv_server) {
    auto client = rendezvous::StoreClient::Connect(
        stores_.rdzv_host, stores_.rdzv_port, stores_.settings.read_timeout, stores_.settings.token,
        rendezvous::StoreRole::kAgent);
    if (!client.ok()) return client.status().Annotate("rendezvous coordinator");
    coordinator_ = std::make_unique<rendezvous::Coordinator>(
        std::move(*client), stores_.settings, stores_.self.agent_id,
        [](const std::string& m) { spdlog::warn("{}", m); });
    if (Status s = coordinator_->Start(); !s.ok()) return s.Annotate("rendezvous coordinator");
  }
  rendezvous::AgentSettings settings;
  settings.rdzv = stores_.settings;
  settings.self = stores_.self;
  settings.role = c_.role;
  settings.hosts_store = stores_.rdzv_server != nullptr;
  // Long enough for the coordinator to find a lost node (keep-alive limit
  // plus one beat): a node's loss, which killed the workers whose peers then
  // die of SIGPIPE, is then a membership change, not a failure.
  settings.peer_settle = PeerSettle();
  auto driver =
      rendezvous::AgentDriver::Connect(stores_.rdzv_host, stores_.rdzv_port, std::move(settings),
                                       [this] { return PendingSignal()().first != 0; });
  store_unreached_ = !driver.ok();  // a rendezvous failure, for the incident's class
  if (!driver.ok()) return driver.status();
  driver_ = std::move(*driver);
  return Status::Ok();
}

Status Agent::ServeFileTimer() {
  const auto enabled = env::Lookup(environ_, env::kEnableFileTimer);
  if (!enabled || *enabled != "1") return Status::Ok();  // torch's test: the string "1"
  std::string path = env::Lookup(environ_, env::kTimerFile).value_or("");
  if (path.empty()) path = DefaultTimerFile(environ_);
  if (Status s = sup_->EnableFileTimer(path); !s.ok()) {
    return Status(s.code(), std::string(env::kEnableFileTimer) + "=1: file timer: " + s.message() +
                                ": set " + env::kTimerFile +
                                " to a new path in a writable directory, or unset " +
                                env::kEnableFileTimer);
  }
  timer_file_ = path;
  spdlog::info("file timer server on {} ({}=1): workers get {}", path, env::kEnableFileTimer,
               env::kTimerFile);
  return Status::Ok();
}

env::GroupInfo Agent::Group(const rendezvous::RoundResult& round) const {
  env::GroupInfo g;
  g.role = c_.role;
  g.run_id = c_.rdzv_id;
  g.local_world_size = c_.nproc_per_node;
  g.world_size = round.world_size;
  g.group_rank = round.node_rank;
  g.group_world_size = static_cast<int>(round.nodes.size());
  g.base_rank = round.base_rank;
  // The one store every agent reached, as they reach it: its workers' key
  // space is the workers' store (with a job token, this host is admitted by
  // its agent's own connection).
  g.master_addr = stores_.rdzv_host;
  g.master_port = stores_.rdzv_port;
  g.restart_count = round.restart_count;
  g.max_restarts = c_.max_restarts;
  g.use_agent_store = true;
  g.signals_to_handle = c_.signals_to_handle;
  g.virtual_local_rank = c_.virtual_local_rank;
  g.gpus = c_.gpus;
  g.allowed_cpus = c_.allowed_cpus;
  g.slurm_task = c_.slurm.has_value() || c_.slurm_outside_step;
  g.bound_threads = env::ThreadsPerRank(c_.worker_cpus);
  g.timer_file = timer_file_;
  return g;
}

std::vector<std::string> Agent::ErrorFiles(int attempt) const {
  std::vector<std::string> files;
  for (int r = 0; r < c_.nproc_per_node; ++r) files.push_back(layout_->ErrorFile(attempt, r));
  return files;
}

rendezvous::AgentDriver::SignalQuery Agent::PendingSignal(int after) {
  return [this, after]() -> std::pair<int, std::string> {
    sup_->PollSignals();
    const int sig = after < 0                          ? sup_->pending_signal()
                    : sup_->signals_received() > after ? sup_->last_signal()
                                                       : 0;
    return {sig, sig != 0 ? supervisor::SignalName(sig) : ""};
  };
}

int Agent::FinishLocally(int code, const std::string& message) {
  rendezvous::Action exit;
  exit.kind = rendezvous::ActionKind::kExit;
  exit.exit_code = code;
  exit.message = message;
  return Finish(exit);
}

std::string Agent::Report() const {
  auto why = supervisor::Explain(local_failures_.front(), ExplainFacts());
  return supervisor::FormatReport(program_.name,
                                  ReportHost(round_ ? round_->node_rank : -1, c_.slurm),
                                  local_failures_, why ? why->cause : "", why ? why->fix : "");
}

int Agent::Finish(const rendezvous::Action& exit) {
  // A signal the rendezvous acted on (no group ran to tell the recorder):
  // the run ends as signalled (preempted in a Slurm job), not as an error.
  if (int sig = sup_->last_signal();
      sig != 0 && !exit.failed && exit.exit_code == exit_code::ForSignal(sig)) {
    record_.Signal(sig);
  }
  std::optional<supervisor::Explanation> why;
  if (exit.failed) {
    const auto& cause = exit.root_cause;
    const bool ours = round_ && cause.node_rank == round_->node_rank &&
                      cause.node == stores_.self.name && !local_failures_.empty() &&
                      local_failures_.front().pid == cause.pid;
    if (ours) {
      why = supervisor::Explain(local_failures_.front(), ExplainFacts());
      supervisor::ConsoleWriter::For(STDERR_FILENO).WriteOwnLine(Report());
      if (auto own = env::Lookup(environ_, env::kErrorFile); own && !own->empty()) {
        if (Status s = supervisor::DumpRootCause(local_failures_.front(), *own); !s.ok()) {
          spdlog::warn("the root cause is not written to ddprun's own {}: {}", env::kErrorFile,
                       s.message());
        }
      }
    }
    spdlog::error("{}", exit.message);
    if (rendezvous::FinishedProgram(cause.cls)) {
      spdlog::error(
          "not restarted: the {} worker's program had finished (it removed its heartbeat "
          "file); exit code {}",
          cause.cls == rendezvous::FailureClass::kExitHang ? "hung" : "crashed", exit.exit_code);
    } else if (cause.cls != rendezvous::FailureClass::kRendezvous &&
               cause.cls != rendezvous::FailureClass::kSignal) {
      spdlog::error("no restarts left (--max_restarts={}): exit code {} (the root cause's)",
                    c_.max_restarts, exit.exit_code);
    }
  } else if (last_group_failed_ && exit.exit_code != 0 && !exit.displaced) {
    // A signal ended the job before the last group's failure was handled: still reported,
    // with what had ended the round where it was another node's doing (attack 95: the report
    // named a victim of a lost node alone).
    const std::string victims =
        exit.round_ended.empty()
            ? ""
            : "the round had ended by another node's doing, the job's recorded cause: " +
                  exit.round_ended +
                  "; this node's workers failed of it, and the job waited "
                  "to restart when the signal came";
    supervisor::ConsoleWriter::For(STDERR_FILENO)
        .WriteOwnLine(victims.empty() ? Report()
                                      : supervisor::FormatReport(
                                            program_.name,
                                            ReportHost(round_ ? round_->node_rank : -1, c_.slurm),
                                            local_failures_, victims, ""));
    if (!exit.message.empty()) spdlog::error("{}", exit.message);
  } else if (!exit.message.empty() && exit.exit_code == 0) {
    spdlog::warn("{}", exit.message);
  } else if (!exit.message.empty()) {
    spdlog::error("{}", exit.message);
  }
  int code = exit.exit_code;
  rendezvous::Action told = exit;  // as the incident report says it
  if (code == 0 && !lost_logs_.empty()) {
    const std::string more =
        lost_logs_.size() > 1 ? fmt::format("; {} more above", lost_logs_.size() - 1) : "";
    told.message =
        fmt::format("the workers succeeded but {} log file(s) are incomplete ({}{}); exit code {}",
                    lost_logs_.size(), lost_logs_.front(), more, exit_code::kLogLost);
    spdlog::error("{}", told.message);
    code = exit_code::kLogLost;
  }
  if (exit.exit_code == 0 && layout_->base_is_temporary() && !WritesLogFiles(c_)) {
    std::error_code ignored;  // removed meanwhile, or never to be: nothing to say
    std::filesystem::remove_all(layout_->base_dir(), ignored);  // nothing in it worth keeping
  } else if (layout_->base_is_temporary()) {
    spdlog::info("logs of this run are kept in {}", layout_->run_dir());
  }
  if (driver_) {
    // The host waits for the others to read the record before its store goes.
    // Only a signal that comes during the wait ends it: one already acted on is not news.
    // After a failure the others may be stopping their workers: one that
    // still beats gets their grace too; a host told to go by a signal waits
    // no longer than kLeaveWait.
    const bool failed = exit.exit_code != 0;
    const auto grace = failed && sup_->signals_received() == 0
                           ? std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::duration<double>(c_.shutdown_timeout))
                           : std::chrono::milliseconds(0);
    const int sig = driver_->Leave(
        coordinator_ != nullptr,
        failed ? std::chrono::milliseconds(kLeaveWait) : std::chrono::milliseconds(kExitWait),
        grace, sup_->signals_received() > 0, PendingSignal(sup_->signals_received()));
    if (sig != 0) {
      spdlog::warn("received {} while waiting for the other agents to leave: exiting",
                   supervisor::SignalName(sig));
      code = exit_code::ForSignal(sig);
      record_.Signal(sig);
    }
  }
  if (coordinator_) coordinator_->Stop();
  // A terminating signal that came while this ended decides the exit code too.
  sup_->PollSignals();
  if (int sig = sup_->pending_signal(); sig != 0 && code != exit_code::ForSignal(sig)) {
    spdlog::warn("received {} while exiting: exit code {} (128 + {}), not {}",
                 supervisor::SignalName(sig), exit_code::ForSignal(sig), sig, code);
    code = exit_code::ForSignal(sig);
    record_.Signal(sig);
  }
  // A signal that ended the job while this node's failed group stopped (a
  // restart left for it) leaves no root cause in the record: this node's is
  // the one it reported (attack 87).
  std::optional<rendezvous::Cause> unrecorded;
  if (!exit.failed && !exit.round_ended.empty()) {
    unrecorded.emplace();  // another node's doing, as the record says
    unrecorded->cls = rendezvous::FailureClass::kRendezvous;
    unrecorded->what = exit.round_ended;
  } else if (!exit.failed && last_group_failed_ && !local_failures_.empty()) {
    unrecorded = CauseOf(local_failures_.front());
    unrecorded->cls = rendezvous::FailureClass::kWorker;
    if (round_) unrecorded->node_rank = round_->node_rank;
    unrecorded->node = stores_.self.name;
    if (local_failures_.front().hung) unrecorded->cls = rendezvous::FailureClass::kHang;
  }
  const std::string incident = record_.Finish(
      told, code, round_ ? round_->restart_count : 0, layout_->disabled() ? "" : layout_->run_dir(),
      local_failures_, why ? why->cause : "", why ? why->fix : "", unrecorded);
  if (!incident.empty()) spdlog::info("incident report (JSON): {}", incident);
  return code;
}

// The ranks of every node wait in their collectives for a rank stopped on any
// one (rendezvous/pause_board.hpp): each node's hang limits wait with it.
std::unique_ptr<rendezvous::PauseBoard> Agent::PausesAcrossNodes(
    const rendezvous::RoundResult& round) {
  if (round.nodes.size() < 2) return nullptr;
  auto board = rendezvous::PauseBoard::Start(stores_.rdzv_host, stores_.rdzv_port, stores_.settings,
                                             round.round, stores_.self.agent_id);
  if (!board.ok()) {
    spdlog::warn(
        "{}: a worker stopped on another node (SIGSTOP, a debugger) is not known here, and its "
        "peers here that wait for it count toward the hang limits",
        board.status().message());
    return nullptr;
  }
  rendezvous::PauseBoard* b = board->get();
  sup_->SetPeerPauses({[b, node = round.node_rank, host = stores_.self.name](HeldWorker here) {
                         here.node_rank = node;
                         here.host = host;
                         b->Tell(here);
                       },
                       [b] { return b->Elsewhere(); }});
  return std::move(*board);
}

std::optional<int> Agent::RunRound(const rendezvous::RoundResult& round) {
  if (round_ && round.restart_count > round_->restart_count) {
    spdlog::warn(
        "restarting the workers of every node after a failure{}: restart {} of {} "
        "(--max_restarts)",
        round.previous_end.empty() ? "" : " (" + round.previous_end + ")", round.restart_count,
        c_.max_restarts);
    record_.Restart(round.restart_count, c_.max_restarts);
  }
  round_ = round;
  hang_all_waiting_ = false;
  // The last group's failure was handled: this round restarts the workers. What ends the job
  // from here on is not that failure (it was reported as the FAILED block of a job that
  // could not restart).
  last_group_failed_ = false;
  env::GroupInfo group = Group(round);
  spdlog::info(
      "rendezvous round {} complete: node rank {} of {}, world size {}, restart count {}, "
      "MASTER_ADDR={} MASTER_PORT={}",
      round.round, round.node_rank, round.nodes.size(), round.world_size, round.restart_count,
      group.master_addr, group.master_port);
  record_.RoundComplete(round, group.master_addr, group.master_port);
  std::string lost_logs;
  if (Status s =
          layout_->PrepareAttempt(round.restart_count, round.round, c_.nproc_per_node, &lost_logs);
      !s.ok()) {
    return FinishLocally(1, s.message());
  }
  if (!lost_logs.empty()) spdlog::warn("{}", lost_logs);
  if (c_.hang_detect_torch && !layout_->disabled()) {
    auto hook = torch_hook_.Write(layout_->run_dir(), env::Lookup(environ_, "TMPDIR").value_or(""));
    if (!hook.ok()) return FinishLocally(1, hook.status().message());
    group.torch_hook_dir = torch_hook_dir_ = *hook;
    hook_looked_.clear();
    group.nccl_ras_addr = NcclRasAddr();
  }
  auto specs = BuildWorkerSpecs(c_, program_, group, *layout_, environ_);
  if (!specs.ok()) return FinishLocally(exit_code::kUsage, specs.status().message());
  sup_->ClearStopRequest();
  Status watching = driver_->StartWatching(
      [this](const std::string& reason) {
        spdlog::warn("stopping the workers: {}", reason);
        record_.MembershipChange(reason);
        sup_->RequestStop();
      },
      [](const std::string& note) { spdlog::warn("{}", note); });
  if (!watching.ok()) return FinishLocally(1, watching.message());
  std::unique_ptr<rendezvous::PauseBoard> board = PausesAcrossNodes(round);
  facts_.GroupStarting(*specs);
  supervisor::GroupResult result = sup_->RunGroup(*specs, options_);
  driver_->StopWatching();
  sup_->SetPeerPauses({});
  board.reset();  // tells the other nodes that no worker here holds the job any more
  supervisor::CountOwnFailures(result, ErrorFiles(round.restart_count));
  record_.WorkersExited(result.workers);
  std::vector<std::string> stderr_logs;
  for (int r = 0; r < c_.nproc_per_node; ++r) {
    const bool to_file = ((c_.redirects.For(r) | c_.tee.For(r)) & 2) != 0;
    stderr_logs.push_back(to_file ? layout_->StderrPath(round.restart_count, r) : "");
  }
  supervisor::FillTailsFromLogs(result, stderr_logs);
  LogStopped(result);
  WarnIfFull(facts_.AnyWritesOwnLogs() ? layout_->run_dir() : "");
  for (const auto& w : result.workers) {
    lost_logs_.insert(lost_logs_.end(), w.lost_logs.begin(), w.lost_logs.end());
  }
  driver_->WorkersExited(Outcome(round, result));
  return std::nullopt;
}

int Agent::Run() {
  if (Status s = Setup(); !s.ok()) {
    const int sig = s.code() == StatusCode::kAborted ? sup_->pending_signal() : 0;
    if (sig != 0)
      s = Status(s.code(), "received " + supervisor::SignalName(sig) + ": " + s.message());
    spdlog::error("{}", s.message());
    if (coordinator_) coordinator_->Stop();
    const int code = sig != 0                                       ? exit_code::ForSignal(sig)
                     : exit_code::ForStatus(s) == exit_code::kUsage ? exit_code::kUsage
                                                                    : exit_code::kFailure;
    if (sig != 0) record_.Signal(sig);
    rendezvous::Action exit;
    exit.kind = rendezvous::ActionKind::kExit;
    exit.exit_code = code;
    exit.message = s.message();
    exit.store_lost = store_unreached_;
    const std::string incident = record_.Finish(
        exit, code, 0, layout_ && !layout_->disabled() ? layout_->run_dir() : "", {}, "", "");
    if (!incident.empty()) spdlog::info("incident report (JSON): {}", incident);
    return code;
  }
  if (c_.nproc_per_node > 1 && !env::Lookup(environ_, env::kOmpNumThreads) &&
      !c_.worker_cpus.empty()) {
    std::string threads;
    for (int t : env::ThreadsPerRank(c_.worker_cpus)) {
      threads += (threads.empty() ? "" : ",") + std::to_string(t);
    }
    spdlog::warn(
        "OMP_NUM_THREADS is not set: setting it per local rank to the CPUs it is bound to "
        "(divided among ranks bound to the same CPUs): {}; set it to tune",
        threads);
  } else if (c_.nproc_per_node > 1 && !env::Lookup(environ_, env::kOmpNumThreads)) {
    spdlog::warn(
        "OMP_NUM_THREADS is not set: setting it to {} for each of the {} workers ({} allowed "
        "CPUs shared out; set it to tune)",
        env::DefaultOmpThreads(c_.allowed_cpus, c_.nproc_per_node), c_.nproc_per_node,
        c_.allowed_cpus);
  }
  while (true) {
    rendezvous::Action action = driver_->Next(
        PendingSignal(), [](const std::string& progress) { spdlog::info("{}", progress); });
    switch (action.kind) {
      case rendezvous::ActionKind::kClearWorkerStore:
        if (Status s = driver_->ClearWorkerStore(); !s.ok()) return FinishLocally(1, s.message());
        break;
      case rendezvous::ActionKind::kStartWorkers:
        if (auto code = RunRound(action.round)) return *code;
        break;
      case rendezvous::ActionKind::kExit:
        return Finish(action);
      case rendezvous::ActionKind::kWait:
      case rendezvous::ActionKind::kStopWorkers:
        break;  // no workers run here now: nothing to stop
    }
  }
}

}  // namespace internal

int RunAgent(const LaunchConfig& config, const Program& program, const env::Environ& environ) {
  internal::Agent agent(config, program, environ);
  return agent.Run();
}

}  // namespace ddprun::launcher
