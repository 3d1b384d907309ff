// Where the job's one store is, and whether this agent hosts it: the only
// port ddprun listens on. It serves the agents' rendezvous and, in a key
// space of their own, the workers (MASTER_ADDR:MASTER_PORT is this store's
// host and port on every node). Built once per launcher run from the config.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/environ.hpp"
#include "launcher/launch_config.hpp"
#include "rendezvous/rendezvous.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::launcher {

struct JobStores {
  std::string rdzv_host;  // where agents connect
  int rdzv_port = 0;
  std::unique_ptr<rendezvous::StoreServer> rdzv_server;  // set on the hosting agent
  rendezvous::RendezvousSettings settings;
  rendezvous::NodeInfo self;
};

// Reads --rdzv_conf (and DDPRUN_STORE_TOKEN) into rendezvous settings;
// unknown keys come back as notices.
// The warning for a --rdzv_conf key that no one reads (a typo: "did you
// mean join_timeout?"); nullopt for a key ddprun knows.
std::optional<std::string> UnknownConfKey(const std::string& key, const std::string& value);

StatusOr<rendezvous::RendezvousSettings> SettingsFromConfig(const LaunchConfig& config,
                                                            const env::Environ& environ,
                                                            std::vector<std::string>* notices);

// Whether the job's nodes may run on other hosts than this one: more than one
// node, and a store not at a loopback address (from where only this host
// reaches it).
bool NodesMaySpanHosts(const LaunchConfig& config);

// The agent's stores: default limits and guard, notable events as warnings.
rendezvous::StoreServerOptions StoreOptions(const std::string& host, int port,
                                            const std::string& token);

// Where a static job's store is: --master_addr/--master_port, or its
// --rdzv_endpoint when given (as torchrun).
Status StaticStoreAddress(const LaunchConfig& config, std::string* host, int* port);
// The option a static job's store port comes from, for messages:
// "--rdzv_endpoint" when that has a port, else "--master_port".
std::string StaticPortOption(const LaunchConfig& config);

// Where a c10d job's store is: its --rdzv_endpoint (port 29400 when not given).
Status C10dStoreAddress(const LaunchConfig& config, std::string* host, int* port);

// A c10d agent's --rdzv_conf is_host: true or false when given, nullopt when
// not (then the agent that can bind the endpoint hosts the store).
StatusOr<std::optional<bool>> C10dIsHost(const LaunchConfig& config);

// Decides who hosts the rendezvous store (static: node rank 0; c10d: is_host,
// else the agent that can bind the endpoint), starts the store when this
// agent hosts it, and describes this node.
StatusOr<JobStores> OpenJobStores(const LaunchConfig& config, const env::Environ& environ,
                                  std::vector<std::string>* notices);

}  // namespace ddprun::launcher
