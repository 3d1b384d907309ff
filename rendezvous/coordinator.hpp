// The round manager that runs on a thread of the agent hosting the
// rendezvous store: it closes rounds (MAX joined, or MIN joined and the last
// call expired), assigns node ranks, watches the members' keep-alive
// counters, and ends a round when a member is lost (closing the job if fewer
// than MIN remain) or when a new agent waits to join and there is room.
//
// It talks to the store through its own client connection, like any agent.
// Start() returns at once; Stop() (and the destructor) end the thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "rendezvous/rendezvous.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::rendezvous {

class Coordinator {
 public:
  using Log = std::function<void(const std::string&)>;  // must be thread-safe

  Coordinator(StoreClient client, RendezvousSettings settings, Log log);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  void Start();
  // Interrupts the coordinator's store request in flight and joins the thread.
  void Stop();

 private:
  void Run();
  // Gathers round `round`; false when the job must end (timeout, closed).
  StatusOr<bool> Gather(int round, std::vector<NodeInfo>* members);
  // Watches a running round until it ends; false when the job is over.
  StatusOr<bool> Watch(int round, const std::vector<NodeInfo>& members);
  // "round 0 timed out ...: 2 of at least 3 nodes joined; seen: ...; missing node ranks: 1"
  std::string TimeoutReport(int round);
  StatusOr<bool> LostMember(int round, const std::vector<NodeInfo>& members,
                            const std::string& lost);

  StoreClient client_;
  RendezvousSettings settings_;
  RendezvousKeys keys_;
  Log log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ddprun::rendezvous
