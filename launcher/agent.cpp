#include "launcher/agent.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "env/host.hpp"
#include "env/log_layout.hpp"
#include "env/names.hpp"
#include "env/worker_env.hpp"
#include "launcher/dump_request.hpp"
#include "launcher/job_stores.hpp"
#include "launcher/worker_specs.hpp"
#include "rendezvous/coordinator.hpp"
#include "rendezvous/round_watcher.hpp"
#include "supervisor/debug_dump.hpp"
#include "supervisor/failure_report.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::launcher {

namespace {

constexpr int kUsageExit = 2;
constexpr int kHangExit = 124;  // as timeout(1): the root cause was a hung worker
constexpr std::chrono::seconds kExitWait{30};
constexpr std::chrono::seconds kLeaveWait{5};

// Whether -r/-t/--duplicate_*_filters asked for files that must outlive the run.
bool WritesLogFiles(const LaunchConfig& c) {
  auto any = [](const StreamSelection& s) {
    if (s.all != 0) return true;
    for (const auto& [rank, bits] : s.by_rank) {
      if (bits != 0) return true;
    }
    return false;
  };
  return any(c.redirects) || any(c.tee) || !c.duplicate_stdout_filters.empty() ||
         !c.duplicate_stderr_filters.empty();
}

void LogStopped(const supervisor::GroupResult& r) {
  for (const auto& w : r.workers) {
    if (w.state == supervisor::WorkerState::kAbandoned) {
      spdlog::error(
          "rank {} (local_rank {}, pid {}) did not exit after SIGKILL (stuck in the "
          "kernel, state D?): abandoned",
          w.rank, w.local_rank, w.pid);
    } else if (w.state == supervisor::WorkerState::kStopped) {
      spdlog::info("rank {} (local_rank {}, pid {}) stopped by ddprun: {}", w.rank, w.local_rank,
                   w.pid, w.exit.Describe());
    }
  }
}

// The agent's state for one launcher run.
class Agent {
 public:
  Agent(const LaunchConfig& c, const Program& p, const env::Environ& e)
      : c_(c), program_(p), environ_(e) {}

  int Run();

 private:
  Status Setup();
  env::GroupInfo Group(const rendezvous::RoundResult& round) const;
  Status PrepareWorkerStore(const rendezvous::RoundResult& round);
  std::optional<int> RunRound(const rendezvous::RoundResult& round);
  std::optional<int> OnFailure(const rendezvous::RoundResult& round,
                               const supervisor::GroupResult& result);
  std::optional<int> OnRoundEnded(const std::string& reason);
  // `finished`: the round the job completed in (the host then waits for every
  // agent to have seen it).
  int Finish(int code, const rendezvous::RoundResult* finished = nullptr);
  int Closed(const Status& s);
  std::vector<std::string> ErrorFiles() const;
  // Dumps every running worker into `dir` and prints the summary; returns the
  // ranks the flight recorders show as stragglers.
  std::vector<int> DumpWorkers(const supervisor::HangReport& report, const std::string& dir);

  const LaunchConfig& c_;
  const Program& program_;
  const env::Environ& environ_;
  std::optional<env::LogLayout> layout_;
  std::unique_ptr<supervisor::Supervisor> sup_;
  JobStores stores_;
  std::optional<rendezvous::Rendezvous> rdzv_;
  std::optional<rendezvous::RoundResult> round_;  // the round running now
  std::unique_ptr<rendezvous::Coordinator> coordinator_;
  rendezvous::RoundWatcher watcher_;
  supervisor::GroupOptions options_;
  int failures_ = 0;  // failure restarts so far (TORCHELASTIC_RESTART_COUNT)
  std::mutex end_mu_;
  std::string end_reason_;  // why the watcher stopped the group
};

Status Agent::Setup() {
  auto layout = env::LogLayout::Create(c_.log_dir, c_.rdzv_id);
  if (!layout.ok()) return layout.status();
  layout_ = std::move(*layout);
  auto sup = supervisor::Supervisor::Create(c_.handled_signals);
  if (!sup.ok()) return sup.status();
  sup_ = std::move(*sup);
  options_.shutdown_timeout = supervisor::Duration(c_.shutdown_timeout);
  options_.hang_timeout = supervisor::Duration(c_.hang_timeout);
  options_.startup_timeout = supervisor::Duration(c_.startup_timeout);
  options_.progress_from_output = c_.hang_detect_output;
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (c_.handled_signals.count(sig) != 0) options_.forward_only.insert(sig);
  }
  sup_->SetHangHandler([this](const supervisor::HangReport& report) {
    for (const auto& w : report.hung) {
      spdlog::error("rank {} (local_rank {}, pid {}) hung: {} for {:.1f} s", w.rank, w.local_rank,
                    w.pid, w.ever_beat ? "no heartbeat" : "no first heartbeat", w.silent_seconds);
    }
    return DumpWorkers(report, layout_->DumpDir(failures_));
  });
  sup_->SetDumpHandler(DumpSignal(), [this](const supervisor::HangReport& report) {
    static int requests = 0;
    DumpWorkers(report, layout_->DumpDir(failures_) + "/request_" + std::to_string(++requests));
    return std::vector<int>{};
  });
  std::vector<std::string> notices;
  auto stores = OpenJobStores(c_, environ_, &notices);
  for (const auto& n : notices) spdlog::info("{}", n);
  if (!stores.ok()) return stores.status();
  stores_ = std::move(*stores);
  auto rdzv = rendezvous::Rendezvous::Connect(stores_.rdzv_host, stores_.rdzv_port,
                                              stores_.settings, stores_.self);
  if (!rdzv.ok()) return rdzv.status();
  rdzv_.emplace(std::move(*rdzv));
  if (stores_.rdzv_server) {
    auto client =
        rendezvous::StoreClient::Connect(stores_.rdzv_host, stores_.rdzv_port,
                                         stores_.settings.read_timeout, stores_.settings.token);
    if (!client.ok()) return client.status().Annotate("rendezvous coordinator");
    coordinator_ = std::make_unique<rendezvous::Coordinator>(
        std::move(*client), stores_.settings, [](const std::string& m) { spdlog::warn("{}", m); });
    coordinator_->Start();
  }
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
  g.master_addr = round.nodes[0].addr;
  g.master_port = round.nodes[0].worker_store_port;
  g.restart_count = failures_;
  g.max_restarts = c_.max_restarts;
  g.use_agent_store = true;
  g.signals_to_handle = c_.signals_to_handle;
  g.virtual_local_rank = c_.virtual_local_rank;
  g.gpus = c_.gpus;
  return g;
}

// Rank 0 empties its worker store so no key of the last attempt survives
// (PyTorch issue #135712); nobody starts workers before it did.
Status Agent::PrepareWorkerStore(const rendezvous::RoundResult& round) {
  if (round.node_rank == 0) {
    stores_.worker_server->Clear();
    if (Status s = rdzv_->MarkCleared(round.round); !s.ok()) return s;
  } else if (Status s = rdzv_->WaitCleared(round.round); !s.ok()) {
    return s;
  }
  if (stores_.settings.token.empty()) return Status::Ok();
  // Admits this host's workers at rank 0's worker store (rank 0's own too:
  // its workers connect from this host like anyone's).
  auto admit =
      rendezvous::StoreClient::Connect(round.nodes[0].addr, round.nodes[0].worker_store_port,
                                       stores_.settings.read_timeout, stores_.settings.token);
  return admit.ok() ? Status::Ok() : admit.status().Annotate("worker store");
}

std::vector<int> Agent::DumpWorkers(const supervisor::HangReport& report, const std::string& dir) {
  if (layout_->disabled()) {
    spdlog::warn("no debug dump: --log_dir=/dev/null leaves nowhere to write it");
    return {};
  }
  const auto now = std::chrono::system_clock::now();
  supervisor::DumpRequest request;
  request.dir = dir;
  for (const auto& w : report.running) {
    request.targets.push_back(
        {w.rank, w.local_rank, w.pid, layout_->TracePath(failures_, w.local_rank)});
  }
  for (const auto& w : report.hung) {
    auto silent = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::duration<double>(w.silent_seconds));
    request.hung.push_back({w.rank, now - silent});
  }
  request.beating = report.beating_ranks;
  if (round_) {
    // The analysis covers this node's ranks and says which it cannot see.
    for (int r = 0; r < round_->world_size; ++r) {
      if (r < round_->base_rank || r >= round_->base_rank + c_.nproc_per_node) {
        request.unseen[r] = "on another node: that node's agent dumps it";
      }
    }
  }
  auto dump = supervisor::WriteDebugDump(request);
  if (!dump.ok()) {
    spdlog::error("debug dump: {}", dump.status().message());
    return {};
  }
  std::fputs(dump->summary.c_str(), stderr);
  spdlog::info("debug dump of {} workers in {}", request.targets.size(), dir);
  return dump->stragglers;
}

std::vector<std::string> Agent::ErrorFiles() const {
  std::vector<std::string> files;
  for (int r = 0; r < c_.nproc_per_node; ++r) files.push_back(layout_->ErrorFile(failures_, r));
  return files;
}

int Agent::Finish(int code, const rendezvous::RoundResult* finished) {
  watcher_.Stop();
  if (!rdzv_) return code;
  if (coordinator_ && finished != nullptr) {
    rdzv_->WaitExits(*finished, kExitWait);
  } else if (coordinator_) {
    // The job ended otherwise: the others read why before the store goes.
    rdzv_->WaitOthersLeaving(rdzv_->JoinedLastRound() - 1, kLeaveWait);
  } else {
    rdzv_->AnnounceLeaving();
  }
  if (coordinator_) coordinator_->Stop();
  return code;
}

int Agent::Closed(const Status& s) {
  if (s.code() != StatusCode::kAborted) {
    spdlog::error("{}", s.message());
    return Finish(1);
  }
  int code = 1;
  std::string message;
  rendezvous::ParseClosed(s.message(), &code, &message);
  spdlog::error("the job was ended: {}", message);
  return Finish(code);
}

std::optional<int> Agent::OnFailure(const rendezvous::RoundResult& round,
                                    const supervisor::GroupResult& result) {
  auto failures = supervisor::CollectFailures(result, ErrorFiles());
  const auto& root = failures.front();
  const int code = root.hung ? kHangExit : root.exit.ShellCode();
  std::string what = "code=" + std::to_string(code) + " node " + std::to_string(round.node_rank) +
                     " (" + stores_.self.name + "): rank " + std::to_string(root.rank) +
                     " (local_rank " + std::to_string(root.local_rank) + ", pid " +
                     std::to_string(root.pid) + ") " +
                     (root.hung ? root.message : root.exit.Describe());
  (void)rdzv_->EndRound(round.round, "failure: " + what);
  watcher_.Stop();
  ++failures_;
  if (failures_ <= c_.max_restarts && result.received_signal == 0) {
    spdlog::warn(
        "worker group failed: {}; {}/{} restarts left: restarting the workers of every "
        "node",
        what, c_.max_restarts - failures_ + 1, c_.max_restarts);
    return std::nullopt;
  }
  std::string report = supervisor::FormatReport(program_.name, env::Fqdn(), failures);
  std::fputs(report.c_str(), stderr);
  if (auto own = env::Lookup(environ_, env::kErrorFile); own && !own->empty()) {
    supervisor::DumpRootCause(root, *own);
  }
  (void)rdzv_->Close(
      code, what + "; no restarts left (--max_restarts=" + std::to_string(c_.max_restarts) + ")");
  return Finish(code);
}

std::optional<int> Agent::OnRoundEnded(const std::string& reason) {
  const std::string kind = rendezvous::EndKind(reason);
  if (kind == "store") {
    spdlog::error("rendezvous: {}", reason.substr(reason.find(':') + 2));
    return Finish(1);
  }
  spdlog::warn("round ended elsewhere: {}", reason);
  if (kind != "failure") return std::nullopt;  // membership changes are not counted
  if (++failures_ <= c_.max_restarts) return std::nullopt;
  // Restarts are counted alike on every node: this one gives up too, with the
  // root cause's exit code ("failure: code=N ...").
  int code = 1;
  auto at = reason.find("code=");
  if (at != std::string::npos) code = std::atoi(reason.c_str() + at + 5);
  spdlog::error("no restarts left (--max_restarts={}): the job failed", c_.max_restarts);
  return Finish(code);
}

std::optional<int> Agent::RunRound(const rendezvous::RoundResult& round) {
  round_ = round;
  const env::GroupInfo group = Group(round);
  spdlog::info(
      "rendezvous round {} complete: node rank {} of {}, world size {}, MASTER_ADDR={} "
      "MASTER_PORT={}",
      round.round, round.node_rank, round.nodes.size(), round.world_size, group.master_addr,
      group.master_port);
  if (Status s = PrepareWorkerStore(round); !s.ok()) return Closed(s);
  if (Status s = layout_->PrepareAttempt(failures_, c_.nproc_per_node); !s.ok()) return Closed(s);
  auto specs = BuildWorkerSpecs(c_, program_, group, *layout_, environ_);
  if (!specs.ok()) {
    spdlog::error("{}", specs.status().message());
    return kUsageExit;
  }
  sup_->ClearStopRequest();
  end_reason_.clear();
  Status watching =
      watcher_.Start(stores_.rdzv_host, stores_.rdzv_port, stores_.settings, stores_.self.agent_id,
                     round.round, [this](const std::string& reason) {
                       {
                         std::lock_guard<std::mutex> lock(end_mu_);
                         end_reason_ = reason;
                       }
                       sup_->RequestStop();
                     });
  if (!watching.ok()) return Closed(watching);
  supervisor::GroupResult result = sup_->RunGroup(*specs, options_);
  LogStopped(result);
  switch (result.outcome) {
    case supervisor::Outcome::kSucceeded: {
      auto finished = rdzv_->FinishRound(round);
      if (!finished.ok()) return Closed(finished.status());
      if (*finished) {
        if (layout_->base_is_temporary() && !WritesLogFiles(c_)) {
          std::filesystem::remove_all(layout_->base_dir());  // nothing in it worth keeping
        }
        return Finish(0, &round);
      }
      watcher_.Stop();
      auto reason = rdzv_->RoundEnd(round.round);
      return OnRoundEnded(reason.ok() && *reason ? **reason : "membership: round ended");
    }
    case supervisor::Outcome::kInterrupted:
      spdlog::warn("received {}: workers stopped", supervisor::SignalName(result.received_signal));
      (void)rdzv_->EndRound(round.round, "membership: node " + std::to_string(round.node_rank) +
                                             " (" + stores_.self.name + ") was stopped by " +
                                             supervisor::SignalName(result.received_signal));
      if (coordinator_) {
        // Without its host the job cannot go on: say why to every agent.
        (void)rdzv_->Close(128 + result.received_signal,
                           "the agent hosting the store was stopped by " +
                               supervisor::SignalName(result.received_signal));
      }
      return Finish(128 + result.received_signal);
    case supervisor::Outcome::kFailed:
      return OnFailure(round, result);
    case supervisor::Outcome::kStopped:
    case supervisor::Outcome::kRunning: {
      watcher_.Stop();
      std::lock_guard<std::mutex> lock(end_mu_);
      return OnRoundEnded(end_reason_);
    }
  }
  return 1;
}

int Agent::Run() {
  if (Status s = Setup(); !s.ok()) {
    spdlog::error("{}", s.message());
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnimplemented
               ? kUsageExit
               : 1;
  }
  if (c_.nproc_per_node > 1 && !env::Lookup(environ_, env::kOmpNumThreads)) {
    spdlog::warn(
        "OMP_NUM_THREADS is not set: setting it to 1 for each of the {} workers (set it "
        "to tune)",
        c_.nproc_per_node);
  }
  while (true) {
    if (int sig = sup_->pending_signal(); sig != 0) return Finish(128 + sig);
    auto round = rdzv_->NextRound();
    if (!round.ok()) return Closed(round.status());
    if (auto code = RunRound(*round)) return *code;
  }
}

}  // namespace

int RunAgent(const LaunchConfig& config, const Program& program, const env::Environ& environ) {
  Agent agent(config, program, environ);
  return agent.Run();
}

}  // namespace ddprun::launcher
