#include "launcher/start_failure.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "env/host.hpp"
#include "launcher/job_stores.hpp"
#include "launcher/slurm_options.hpp"
#include "rendezvous/job_record.hpp"
#include "rendezvous/kv.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::launcher {

namespace {

// How long a node that cannot start waits for the store host to be up: the
// nodes of a job start within seconds of each other, mostly.
constexpr std::chrono::seconds kWait{60};

// Said when the others cannot be told, and `why`.
void Untold(const std::string& why) {
  spdlog::warn(
      "the other nodes could not be told ({}): any still waiting for this one wait until their "
      "join_timeout (the store gone: the job has likely ended already)",
      why);
}

}  // namespace

void TellJobOfStartFailure(const LaunchConfig& config, const env::Environ& environ,
                           const std::string& why, int exit_code) {
  // An elastic job may run without this node; a fixed number of nodes cannot.
  const bool c10d = config.rdzv_backend == "c10d";
  if ((config.rdzv_backend != "static" && !c10d) || config.nnodes_max <= 1 ||
      config.nnodes_min != config.nnodes_max) {
    return;
  }
  LaunchConfig c = config;
  if (auto resolved = ResolveSlurmStoreHost(c); !resolved.ok()) return;
  std::vector<std::string> notices;
  auto settings = SettingsFromConfig(c, environ, &notices);
  std::string host;
  int port = 0;
  if (!settings.ok() ||
      !(c10d ? C10dStoreAddress(c, &host, &port).ok() : StaticStoreAddress(c, &host, &port).ok())) {
    return;
  }
  // The node that would host the store (static: node rank 0; c10d: the one
  // that can bind the endpoint, or is_host) serves it for as long as the
  // others take to read the record (they wait for the store at their start
  // anyway).
  std::unique_ptr<rendezvous::StoreServer> server;
  auto is_host = c10d ? C10dIsHost(c) : StatusOr<std::optional<bool>>(c.node_rank == 0);
  if (!is_host.ok()) return;
  if (is_host->value_or(true)) {
    auto started = rendezvous::StoreServer::Start(StoreOptions(host, port, settings->token));
    if (started.ok()) {
      server = std::move(*started);
      port = server->port();
    } else if (is_host->has_value()) {
      return Untold("the store could not be served: " + started.status().message());
    }  // c10d: another agent may host it; this one is told as a client
  }
  const auto within = std::min<std::chrono::milliseconds>(settings->connect_timeout, kWait);
  const bool ranked = !c10d || c.node_rank_set;  // c10d gives ranks as nodes join
  const std::string node_name =
      c.slurm && !c.slurm->node_name.empty() ? c.slurm->node_name : env::Hostname();
  spdlog::info(
      "telling the job's other nodes (store {}:{}) that {} cannot start", host, port,
      ranked ? "node rank " + std::to_string(c.node_rank) : "this node (" + node_name + ")");
  auto client =
      rendezvous::StoreClient::Connect(host, port, settings->read_timeout, settings->token,
                                       rendezvous::StoreRole::kAgent, {}, within);
  if (!client.ok()) return Untold(client.status().message());
  rendezvous::ClientKv kv(*client);
  const rendezvous::RendezvousKeys keys(settings->run_id);
  if (server) (void)kv.Set(rendezvous::RendezvousKeys::HostedRunId(), settings->run_id);
  auto hosted = kv.TryGet(rendezvous::RendezvousKeys::HostedRunId());
  if (hosted.ok() && *hosted && **hosted != settings->run_id) {
    spdlog::warn("the store at {}:{} coordinates job \"{}\", not \"{}\": nothing told", host, port,
                 **hosted, settings->run_id);
    return;
  }
  rendezvous::Cause cause;
  cause.cls = rendezvous::FailureClass::kRendezvous;
  cause.exit_code = exit_code;
  cause.node = node_name;
  cause.what = "ddprun could not start there: " + why;
  if (ranked) {
    cause.node_rank = c.node_rank;
  } else {  // named by its host alone
    cause.what = "node " + node_name + ": " + cause.what;
  }
  auto applied = rendezvous::ApplyTransition(
      kv, keys, [&](const rendezvous::JobRecord& rec) -> StatusOr<rendezvous::JobRecord> {
        // A round that formed without this node runs on (another agent took
        // its rank): this one is not needed.
        if (rec.round >= 0 && rec.end == rendezvous::RoundEnd::kNone) {
          return Status(StatusCode::kAborted, "a round runs without this node");
        }
        return rendezvous::CloseJob(rec, cause);
      });
  if (!applied.ok()) {
    Untold(applied.status().message());
  } else if (applied->landed && server) {
    spdlog::info(
        "the job's other nodes are told as they come: the store stays up until they "
        "have read it (at most {} s)",
        kWait.count());
    const auto until = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < until) {
      auto left = kv.Add(keys.Departed(), 0);
      if (!left.ok() || *left >= c.nnodes_max - 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } else if (applied->landed) {
    spdlog::info("the job's other nodes were told: they stop now");
  } else {
    spdlog::info("nothing told to the other nodes: {}",
                 applied->record.final() ? "the job is over" : "a round runs without this node");
  }
}

}  // namespace ddprun::launcher
