// Where this agent's rendezvous store is, whether this agent hosts it, and
// the worker store every agent hosts (node rank 0's becomes MASTER_ADDR:
// MASTER_PORT). Built once per launcher run from the config.
#pragma once

#include <memory>
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
  std::unique_ptr<rendezvous::StoreServer> worker_server;
  rendezvous::RendezvousSettings settings;
  rendezvous::NodeInfo self;
};

// Reads --rdzv_conf (and DDPRUN_STORE_TOKEN) into rendezvous settings;
// unknown keys come back as notices.
StatusOr<rendezvous::RendezvousSettings> SettingsFromConfig(const LaunchConfig& config,
                                                            const env::Environ& environ,
                                                            std::vector<std::string>* notices);

// Decides who hosts the rendezvous store (static: node rank 0; c10d: is_host,
// else the agent that can bind the endpoint), starts the stores this agent
// hosts, and describes this node.
StatusOr<JobStores> OpenJobStores(const LaunchConfig& config, const env::Environ& environ,
                                  std::vector<std::string>* notices);

}  // namespace ddprun::launcher
