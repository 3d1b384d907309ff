// Pauses across nodes: the ranks of every node wait in their collectives for
// a rank stopped (SIGSTOP, a debugger) or held by its console on any one of
// them, so every node's hang limits must wait too, not only that node's.
// Each agent tells the others which of its workers holds the job, and when
// none does any more, through the rendezvous store: a log of changes per
// round, "r<N>/pause/<n>" (n from 1), each "<agent id>\n<HeldWorker>",
// appended with COMPARE_SET so that no two agents take one place. Every agent
// of the round reads the whole log in order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/held_worker.hpp"
#include "base/status.hpp"
#include "rendezvous/kv.hpp"
#include "rendezvous/rendezvous.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::rendezvous {

// One agent's reading of a round's log. Pure: tests drive it with a LocalStore.
class PauseLog {
 public:
  PauseLog(const RendezvousKeys& keys, int round, std::string self)
      : keys_(keys), round_(round), self_(std::move(self)) {}
  // Appends `tell` (this agent's held worker now) when given, reading the
  // events of others that took the places before it, then reads every event
  // after the last one read. Fails when the store does.
  Status Step(Kv& kv, const std::optional<HeldWorker>& tell);
  // The key of the next event, not read yet (what to wait for).
  std::string NextKey() const { return keys_.Pause(round_, seen_ + 1); }
  // What holds the job on the other nodes now, by agent id order.
  std::vector<HeldWorker> Elsewhere() const;

 private:
  void Apply(const std::string& event);

  RendezvousKeys keys_;
  int round_;
  std::string self_;
  int64_t seen_ = 0;                        // events read (and written): the log's places 1..seen_
  std::map<std::string, HeldWorker> held_;  // other agents' last word
};

// The log on a connection and a thread of its own, while a round's workers
// run. Thread-safe.
class PauseBoard {
 public:
  static StatusOr<std::unique_ptr<PauseBoard>> Start(const std::string& host, int port,
                                                     const RendezvousSettings& settings, int round,
                                                     const std::string& self);
  // Tells the others that nothing holds this node any more when something
  // did (up to kLastWord), then stops.
  ~PauseBoard();
  PauseBoard(const PauseBoard&) = delete;
  PauseBoard& operator=(const PauseBoard&) = delete;

  // This node's held worker now (state 0: none): told at the thread's next
  // look, within kLook. Never waits.
  void Tell(const HeldWorker& here);
  // The other nodes' held workers as last read. Never waits. Empty once the
  // store is gone (nothing known; the rendezvous says the store is gone).
  std::vector<HeldWorker> Elsewhere() const;

  static constexpr std::chrono::milliseconds kLook{500};
  static constexpr std::chrono::milliseconds kLastWord{2000};

 private:
  PauseBoard(StoreClient client, const RendezvousSettings& settings, int round,
             const std::string& self)
      : client_(std::move(client)), log_(RendezvousKeys(settings.run_id), round, self) {}
  void Run();

  StoreClient client_;
  PauseLog log_;  // the thread's
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  HeldWorker here_;                    // under mu_: as last given to Tell
  HeldWorker told_;                    // under mu_: as last written to the log
  std::vector<HeldWorker> elsewhere_;  // under mu_
  bool stopping_ = false;              // under mu_
  bool done_ = false;                  // under mu_: the thread returned
  std::thread thread_;
};

}  // namespace ddprun::rendezvous
