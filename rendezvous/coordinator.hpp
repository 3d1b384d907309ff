// The thread that drives the CoordinatorMachine (coordinator_machine.hpp) on
// the agent hosting the rendezvous store, over its own client connection.
// It steps when what the machine waits for appears (the next arrival while a
// round gathers, the record's next version) or every poll interval, until the
// job is over or Stop() is called.
//
// Start() returns at once; Stop() (and the destructor) end the thread.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "rendezvous/coordinator_machine.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::rendezvous {

class Coordinator {
 public:
  using Log = CoordinatorMachine::Log;  // must be thread-safe

  Coordinator(StoreClient client, RendezvousSettings settings, std::string self_agent_id, Log log);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Fails when the thread cannot be started (out of threads or memory).
  Status Start();
  // Interrupts the coordinator's store request in flight and joins the thread.
  void Stop();

 private:
  void Run();

  StoreClient client_;
  RendezvousSettings settings_;
  CoordinatorMachine machine_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Waits until `key` is set or `until` comes, whichever is first (a store
// WAIT): what a machine's wake_key() names. Fails when the store does.
Status WaitForKey(StoreClient& client, const std::string& key, Clock::time_point until);

}  // namespace ddprun::rendezvous
