// Steps that come later than the machines asked (a store host stopped or
// starved, a keep_alive_interval shorter than the coordinator's poll): the
// agents and the coordinator over an in-process store, each stepped at the
// wake it asked for on a fake clock (attack 107).
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/coordinator_machine.hpp"
#include "tests/unit/rendezvous/record_test_util.hpp"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using Time = Clock::time_point;

// Agents "0" (hosting the store and the coordinator) to "n-1", stepped when their wakes come
// (the coordinator at its next_wake(), with no earlier wake by a key: the slowest it goes).
struct World {
  LocalStore store;
  RendezvousSettings rdzv;
  std::vector<AgentMachine> agents;
  std::vector<LocalStore::Handle> kvs;
  std::vector<bool> killed, running;
  std::vector<std::optional<Action>> exits;
  LocalStore::Handle kvc = store.Connect();
  std::optional<CoordinatorMachine> coordinator;
  std::vector<std::string> log;
  Time now = Time(std::chrono::hours(1));
  Time coordinator_wake = now;
  std::vector<Time> wakes;

  World(RendezvousSettings settings, int n) : rdzv(std::move(settings)) {
    for (int i = 0; i < n; ++i) {
      agents.emplace_back(record_test::For(rdzv, std::to_string(i)));
      kvs.push_back(store.Connect());
    }
    killed.assign(n, false);
    running.assign(n, false);
    exits.assign(n, std::nullopt);
    wakes.assign(n, now);
    coordinator.emplace(rdzv, "0", [this](const std::string& line) { log.push_back(line); });
  }

  void StepAgent(size_t i) {
    if (killed[i] || exits[i]) return;
    Action a = agents[i].Step(kvs[i], now);
    if (a.kind == ActionKind::kClearWorkerStore) agents[i].WorkerStoreCleared();
    if (a.kind == ActionKind::kStartWorkers) running[i] = true;
    if (a.kind == ActionKind::kStopWorkers) {
      WorkersOutcome stopped;
      stopped.kind = WorkersOutcome::Kind::kStopped;
      agents[i].WorkersExited(stopped, now);
      running[i] = false;
    }
    if (a.kind == ActionKind::kExit) exits[i] = a;
    wakes[i] = std::max(now, agents[i].next_wake());
  }

  // Runs until `until`, in 10 ms ticks; the host (agent 0, its store, its coordinator) runs
  // only while `host_runs(now)`, and the other agents then too (their requests wait for it).
  template <typename Runs>
  void RunUntil(Time until, Runs host_runs) {
    for (; now < until; now += milliseconds(10)) {
      if (!host_runs(now)) continue;
      if (now >= coordinator_wake && !killed[0]) {
        (void)coordinator->Step(kvc, now);
        coordinator_wake = std::max(now, coordinator->next_wake());
      }
      for (size_t i = 0; i < agents.size(); ++i) {
        if (now >= wakes[i]) StepAgent(i);
      }
    }
  }
  void RunUntil(Time until) {
    RunUntil(until, [](Time) { return true; });
  }
  bool Logged(const std::string& text) const {
    for (const auto& line : log) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

RendezvousSettings Elastic(int min_nodes, int max_nodes, milliseconds keep_alive, int attempts) {
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = min_nodes;
  rdzv.max_nodes = max_nodes;
  rdzv.keep_alive_interval = keep_alive;
  rdzv.keep_alive_max_attempt = attempts;
  rdzv.last_call_timeout = milliseconds(500);
  rdzv.join_timeout = std::chrono::seconds(10);
  return rdzv;
}

TEST_CASE("late steps: a keep_alive_interval under the coordinator's poll still closes a round") {
  // Every coordinator step came more than keep_alive_interval after the last, each was taken
  // for a pause that moved the last call on: the round never formed (join_timeout ended it).
  World w(Elastic(1, 2, milliseconds(100), 3), 1);
  const Time start = w.now;
  w.RunUntil(start + std::chrono::seconds(3));
  REQUIRE(w.running[0]);
  CHECK_FALSE(w.exits[0]);
}

TEST_CASE(
    "late steps: a keep_alive_interval under the coordinator's poll still finds a lost node") {
  // Each step reset every member's silence clock: a SIGKILLed node was never lost, and the
  // surviving agent waited for it for ever.
  World w(Elastic(1, 2, milliseconds(100), 3), 2);
  w.RunUntil(w.now + std::chrono::seconds(3));
  REQUIRE((w.running[0] && w.running[1]));
  w.killed[1] = true;
  const Time killed = w.now;
  Time lost_at{};
  while (w.now < killed + std::chrono::seconds(5) && lost_at == Time{}) {
    w.RunUntil(w.now + milliseconds(10));
    if (w.Logged("lost host-1")) lost_at = w.now;
  }
  REQUIRE(lost_at != Time{});
  // The limit is 0.3 s; a poll (0.2 s) and a beat late at most.
  CHECK(lost_at - killed <= milliseconds(700));
  CHECK_FALSE(w.Logged("lost host-0"));
}

TEST_CASE("late steps: a store host starved in turns still finds a killed node, not a live one") {
  // Stopped 1.2 s, running 0.4 s, over and over: each resume reset every silence clock, so a
  // killed node was never found while the starving went on.
  World w(Elastic(2, 3, milliseconds(1000), 2), 3);
  w.RunUntil(w.now + std::chrono::seconds(4));
  REQUIRE((w.running[0] && w.running[1] && w.running[2]));
  w.killed[2] = true;
  const Time killed = w.now;
  const auto starved = [killed](Time t) {
    return (t - killed) % milliseconds(1600) >= milliseconds(1200);
  };
  Time lost_at{};
  while (w.now < killed + std::chrono::seconds(30) && lost_at == Time{}) {
    w.RunUntil(w.now + milliseconds(10), starved);
    if (w.Logged("lost host-2")) lost_at = w.now;
  }
  REQUIRE(lost_at != Time{});
  // The 2 s limit counts only while the host runs: 0.4 s of each 1.6 s, a few turns.
  CHECK(lost_at - killed <= std::chrono::seconds(12));
  CHECK_FALSE(w.Logged("lost host-1"));
}

TEST_CASE(
    "late steps: an agent's join_timeout does not stretch while it waits for a stopped host") {
  // It counted the whole gap between its steps as its own pause: a host stopped for 15 s made
  // a 10 s join_timeout end at 25 s, and the message said 10 s.
  RendezvousSettings rdzv = Elastic(3, 4, milliseconds(500), 3);
  AgentMachine a(record_test::For(rdzv, "1"));
  LocalStore store;
  auto kv = store.Connect();
  CoordinatorMachine coordinator(rdzv, "0", [](const std::string&) {});
  auto kvc = store.Connect();
  Time now = Time(std::chrono::hours(1));
  const Time start = now;
  for (; now < start + milliseconds(1500); now += milliseconds(100)) {
    (void)coordinator.Step(kvc, now);
    REQUIRE(a.Step(kv, now).kind == ActionKind::kWait);
  }
  // Its next request waits 15 s for the host, stopped; then the host runs again.
  now += std::chrono::seconds(15);
  a.WaitedForStore(std::chrono::seconds(15));
  (void)coordinator.Step(kvc, now);
  std::optional<Action> exit;
  for (const Time resumed = now; now < resumed + std::chrono::seconds(3) && !exit;
       now += milliseconds(100)) {
    Action act = a.Step(kv, now);
    if (act.kind == ActionKind::kExit) exit = act;
  }
  REQUIRE(exit);
  CHECK(exit->message.find("timed out after 10 s (join_timeout)") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::rendezvous
