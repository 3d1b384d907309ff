// Drives an AgentMachine (agent_machine.hpp) against the real store: the
// agent's main thread asks Next() for the next thing to do; while workers run,
// a companion thread on its own connection keeps stepping the machine, so
// the agent keeps beating and learns at once when the round ends (it wakes
// on every change of the job record).
//
// Thread-safe: the machine is behind a mutex; on_stop runs on the companion
// thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::rendezvous {

class AgentDriver {
 public:
  // Connects to the rendezvous store and checks it coordinates this job.
  static StatusOr<std::unique_ptr<AgentDriver>> Connect(const std::string& host, int port,
                                                        AgentSettings settings,
                                                        const Interrupted& interrupted = {});
  ~AgentDriver() { StopWatching(); }
  AgentDriver(const AgentDriver&) = delete;
  AgentDriver& operator=(const AgentDriver&) = delete;

  // Steps until the machine asks for something other than waiting.
  // `pending_signal` is asked between steps: a terminating signal ddprun
  // received (0: none) makes the agent leave the job. It is asked during a
  // store request too: one the store has not answered kSignalGrace after the
  // signal is abandoned, and the agent leaves without a word to the others. `on_progress` gets what
  // the wait is worth telling (which nodes joined a forming round, now and then).
  using SignalQuery = std::function<std::pair<int, std::string>()>;
  using ProgressFn = std::function<void(const std::string&)>;
  Action Next(const SignalQuery& pending_signal, const ProgressFn& on_progress = {});
  // After kClearWorkerStore: empties the workers' key space of the store
  // (closing an earlier round's worker connections) and tells the machine.
  Status ClearWorkerStore();
  // While the workers run: `on_stop(reason)` is called once when they must stop;
  // `on_note(what)` when something is worth telling that does not stop them yet
  // (the store gone: they may end by themselves first).
  using NoteFn = std::function<void(const std::string&)>;
  Status StartWatching(NoteFn on_stop, NoteFn on_note = {});
  void StopWatching();
  void WorkersExited(const WorkersOutcome& outcome);
  // AgentMachine::FailedEarly, taken by the companion thread at its next
  // step (within the machine's poll interval). Never waits for the store.
  void FailedEarly(const WorkersOutcome& outcome);

  static constexpr std::chrono::milliseconds kSignalGrace{1000};

  // After the last action (kExit): this agent says it leaves (given up after
  // kLeaveSaid when the store does not answer); the store host
  // waits (bounded by `timeout`) for the others to have said so too, so the
  // store outlives their last requests; up to `grace` longer for one whose
  // keep-alives still move (stopping its workers); agents lost or of earlier
  // rounds not at all when `signalled` (the job ends by a signal). A
  // terminating signal (asked of `pending_signal` while it waits) ends the
  // wait; returns that signal, or 0.
  int Leave(bool hosts_store, std::chrono::milliseconds timeout, std::chrono::milliseconds grace,
            bool signalled, const SignalQuery& pending_signal);
  static constexpr std::chrono::milliseconds kLeaveSaid{2000};

 private:
  AgentDriver(StoreClient client, std::string host, int port, AgentSettings settings)
      : client_(std::move(client)),
        host_(std::move(host)),
        port_(port),
        keys_(settings.rdzv.run_id),
        machine_(std::move(settings)) {}
  Status CheckHostedJob();
  // machine_.Step now, told how long the requests waited for the store since
  // the last (WaitedForStore), then StepTook with how long it took. Under mu_.
  Action TimedStep(Kv& kv);
  // Every other agent the job has seen, with how long the store host waits
  // for it to leave: until `current` for the last round's members and the
  // agents waiting to join (in_job), until `earlier` for the rest.
  struct Other {
    Clock::time_point until{};
    bool in_job = false;
  };
  std::map<std::string, Other> Others(Kv& kv, const std::string& self, Clock::time_point current,
                                      Clock::time_point earlier);
  void Watch(const NoteFn& on_stop, const NoteFn& on_note);

  StoreClient client_;
  std::string host_;
  int port_;
  RendezvousKeys keys_;
  std::mutex mu_;
  AgentMachine machine_;
  std::optional<StoreClient> watch_client_;
  std::atomic<bool> stop_watching_{false};
  std::condition_variable stop_cv_;  // stop_watching_ set (under mu_)
  std::mutex early_mu_;              // not mu_: a step holds that during store requests
  std::optional<WorkersOutcome> early_;
  std::thread watcher_;
  bool left_ = false;
  std::chrono::nanoseconds waited_at_step_ = StoreClient::Waited();  // as the last step began
};

}  // namespace ddprun::rendezvous
