// An agent's companion thread while a round runs: it keeps the agent alive
// in the coordinator's eyes (a counter bumped every keep_alive_interval) and
// waits for the round to end, calling `on_end` once with the reason: another
// agent's failure, a membership change, or the store being gone.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "rendezvous/rendezvous.hpp"

namespace ddprun::rendezvous {

class RoundWatcher {
 public:
  using OnEnd = std::function<void(const std::string& reason)>;  // called on the thread

  RoundWatcher() = default;
  ~RoundWatcher() { Stop(); }
  RoundWatcher(const RoundWatcher&) = delete;
  RoundWatcher& operator=(const RoundWatcher&) = delete;

  // Connects its own client and starts watching `round`.
  Status Start(const std::string& host, int port, const RendezvousSettings& settings,
               const std::string& agent_id, int round, OnEnd on_end);
  void Stop();

 private:
  void Run(RendezvousSettings settings, std::string agent_id, int round, OnEnd on_end);

  std::atomic<bool> stop_{false};
  std::optional<StoreClient> client_;
  std::thread thread_;
};

// The store prefix of an end reason: "failure", "membership" or "store".
std::string EndKind(const std::string& reason);

}  // namespace ddprun::rendezvous
