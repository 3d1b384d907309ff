// Two agents (node 0 hosting the store) and the coordinator over an
// in-process store, stepped by hand: machines_test.cpp, store_gone_test.cpp.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <tuple>
#include <utility>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/coordinator_machine.hpp"
#include "tests/unit/rendezvous/record_test_util.hpp"

namespace ddprun::rendezvous::test {

struct TwoAgents {
  using Time = Clock::time_point;
  LocalStore store;
  LocalStore::Handle kv0 = store.Connect(), kv1 = store.Connect(), kvc = store.Connect();
  RendezvousSettings rdzv;
  std::optional<AgentMachine> a0, a1;
  std::optional<CoordinatorMachine> coordinator;
  Time now = Time(std::chrono::hours(1));

  // `base`: the settings beyond the job's (keep-alive, timeouts).
  explicit TwoAgents(int max_restarts, RendezvousSettings base = {}) : rdzv(std::move(base)) {
    rdzv.run_id = "t";
    rdzv.min_nodes = rdzv.max_nodes = 2;
    rdzv.max_restarts = max_restarts;
    AgentSettings s;
    s.rdzv = rdzv;
    s.self = record_test::Member("0");
    s.hosts_store = true;
    a0.emplace(s);
    s.self = record_test::Member("1");
    s.hosts_store = false;
    a1.emplace(s);
    coordinator.emplace(rdzv, "0", [](const std::string&) {});
  }
  // Steps everyone until both agents ask for something; returns (a0's, a1's).
  std::pair<Action, Action> Until() {
    std::optional<Action> r0, r1;
    for (int i = 0; i < 100 && !(r0 && r1); ++i) {
      now += std::chrono::milliseconds(50);
      (void)coordinator->Step(kvc, now);
      for (auto [m, kv, r] : {std::tuple(&*a0, &kv0, &r0), std::tuple(&*a1, &kv1, &r1)}) {
        if (*r) continue;
        Action a = m->Step(*kv, now);
        if (a.kind == ActionKind::kClearWorkerStore) {
          m->WorkerStoreCleared();
        } else if (a.kind != ActionKind::kWait) {
          *r = a;
        }
      }
    }
    REQUIRE(r0);
    REQUIRE(r1);
    return {*r0, *r1};
  }
};

}  // namespace ddprun::rendezvous::test
