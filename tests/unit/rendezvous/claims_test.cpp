// Who a round counts: static node-rank claims (a second live claimant fails
// the job; an agent started in place of a killed one takes its rank) and
// arrivals that went silent while they waited (killed or stopped: not closed
// in). The agents and the coordinator over an in-process store, stepped by hand.
#include <doctest/doctest.h>

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/coordinator_machine.hpp"
#include "tests/unit/rendezvous/record_test_util.hpp"

namespace ddprun::rendezvous {
namespace {

using record_test::Member;
using std::chrono::milliseconds;

// Agents started and killed at will; Run steps the living ones and the
// coordinator every 100 ms of fake time.
struct World {
  LocalStore store;
  LocalStore::Handle kvc = store.Connect();
  RendezvousSettings rdzv;
  std::optional<CoordinatorMachine> coordinator;
  std::vector<std::string> coordinator_log;
  struct Agent {
    std::unique_ptr<AgentMachine> machine;
    std::unique_ptr<LocalStore::Handle> kv;
    bool alive = true;
    std::vector<std::string> told;  // kWait messages
    std::optional<Action> action;   // the first action other than kWait
  };
  std::map<std::string, Agent> agents;
  Clock::time_point now = Clock::time_point(std::chrono::hours(1));

  World(int min_nodes, int max_nodes, bool exclusive) {
    rdzv.run_id = "t";
    rdzv.min_nodes = min_nodes;
    rdzv.max_nodes = max_nodes;
    rdzv.exclusive_ranks = exclusive;
    rdzv.last_call_timeout = milliseconds(1000);
    coordinator.emplace(rdzv, "0", [this](const std::string& m) { coordinator_log.push_back(m); });
  }
  // Agent `id` on host-<id>, asking for node rank `rank` (-1: none).
  void Start(const std::string& id, int rank, int max_restarts = 0) {
    AgentSettings s;
    s.rdzv = rdzv;
    s.self = Member(id);
    s.self.requested_rank = rank;
    s.rdzv.max_restarts = max_restarts;
    s.hosts_store = id == "0";
    Agent& a = agents[id];
    a.machine = std::make_unique<AgentMachine>(s);
    a.kv = std::make_unique<LocalStore::Handle>(store.Connect());
  }
  // Runs for `ms`, or until every living agent has an action.
  void Run(int ms) {
    for (int t = 0; t < ms; t += 100) {
      now += milliseconds(100);
      (void)coordinator->Step(kvc, now);
      REQUIRE(coordinator->next_wake() > now);  // else its thread would spin
      bool all = true;
      for (auto& [id, a] : agents) {
        if (!a.alive || a.action) continue;
        Action act = a.machine->Step(*a.kv, now);
        if (act.kind == ActionKind::kClearWorkerStore) {
          a.machine->WorkerStoreCleared();
        } else if (act.kind != ActionKind::kWait) {
          a.action = act;
        } else if (!act.message.empty()) {
          a.told.push_back(act.message);
        }
        all &= a.action.has_value();
      }
      if (all) return;
    }
  }
  const std::optional<Action>& ActionOf(const std::string& id) { return agents.at(id).action; }
  // One step of agent `id` alone, at the current time.
  void StepOne(const std::string& id) {
    Agent& a = agents.at(id);
    Action act = a.machine->Step(*a.kv, now);
    if (act.kind != ActionKind::kWait) {
      a.action = act;
    } else if (!act.message.empty()) {
      a.told.push_back(act.message);
    }
  }
};

bool Has(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

// Every agent of `ids` started the workers of one round.
void RequireStarted(World& w, std::initializer_list<const char*> ids) {
  for (const char* id : ids) {
    INFO(std::string(id));
    REQUIRE(w.ActionOf(id));
    CHECK(w.ActionOf(id)->kind == ActionKind::kStartWorkers);
  }
}

// Static, 3 nodes: node 1's agent is stopped (SIGSTOP) while it waits for
// node 2, and an agent started in its place has taken its rank over.
void StopNodeOneAndReplaceIt(World& w) {
  w.Start("0", 0);
  w.Start("1", 1);
  w.Run(300);
  w.agents.at("1").alive = false;  // SIGSTOP
  w.Start("1b", 1);
  w.Run(17000);
}

TEST_CASE("claims: a static node rank claimed by a second live agent fails the job, naming both") {
  World w(3, 3, true);
  w.Start("0", 0);
  w.Start("1", 1);
  w.Run(300);
  w.Start("2", 1);  // the mistake: a second agent given --node_rank=1
  // Within a keep-alive interval the holder shows it is alive; meanwhile the
  // round does not close with either claimant.
  w.Run(7000);
  for (const char* id : {"0", "1", "2"}) {
    INFO(std::string(id));
    const auto& a = w.ActionOf(id);
    REQUIRE(a);
    REQUIRE(a->kind == ActionKind::kExit);
    CHECK(a->exit_code == 1);
    CHECK(a->message.find("node rank 1 was claimed twice: by host-1 (10.0.0.1, agent 1), then by "
                          "host-2 (10.0.0.2, agent 2), which was refused while the first sends "
                          "keep-alives") != std::string::npos);
  }
}

TEST_CASE(
    "claims: an agent started in place of a killed one takes its node rank and the job runs") {
  World w(3, 3, true);
  w.Start("0", 0);
  w.Start("1", 1);
  w.Run(1000);
  w.agents.at("1").alive = false;  // SIGKILL while it waits for node 2
  w.Run(2000);
  w.Start("1b", 1);  // started again with the same --node_rank
  w.Run(3000);
  w.Start("2", 2);
  // Node 2 makes three arrivals that hold their claims, but node rank 1 is
  // contested: the round waits rather than close with the dead agent.
  w.Run(3000);
  CHECK_FALSE(w.ActionOf("0"));
  w.Run(20000);
  RequireStarted(w, {"0", "1b", "2"});
  for (const char* id : {"0", "1b", "2"}) {
    CHECK(w.ActionOf(id)->round.round == 0);
    CHECK(w.ActionOf(id)->round.nodes.size() == 3);
  }
  CHECK(Has(w.agents.at("0").told,
            "host-1b (10.0.0.1b) waits for node rank 1, which an earlier agent holds"));
  CHECK(w.ActionOf("1b")->round.node_rank == 1);
  CHECK(w.ActionOf("1b")->round.nodes[1].agent_id == "1b");
  CHECK(Has(w.agents.at("1b").told,
            "node rank 1's agent host-1 (10.0.0.1, agent 1) sent no keep-alive for 15 s and "
            "was replaced by host-1b (10.0.0.1b, agent 1b)"));
}

TEST_CASE("claims: an agent whose rank was taken over while it was stopped leaves, saying so") {
  World w(3, 3, true);
  StopNodeOneAndReplaceIt(w);
  w.Start("2", 2);
  w.Run(2000);
  REQUIRE(w.ActionOf("1b"));
  CHECK(w.ActionOf("1b")->kind == ActionKind::kStartWorkers);
  w.agents.at("1").alive = true;  // SIGCONT
  w.Run(1000);
  const auto& a = w.ActionOf("1");
  REQUIRE(a);
  REQUIRE(a->kind == ActionKind::kExit);
  CHECK(a->exit_code == 1);
  CHECK(a->message.rfind("node rank 1 was taken over by host-1b (10.0.0.1b, agent 1b) while this "
                         "agent sent no keep-alive for 15 s (it was stopped or starved)",
                         0) == 0);
}

TEST_CASE("claims: an agent taken over that comes back after the job succeeded says so") {
  World w(3, 3, true);
  StopNodeOneAndReplaceIt(w);
  w.Start("2", 2);
  w.Run(2000);
  RequireStarted(w, {"0", "1b", "2"});
  WorkersOutcome succeeded;
  succeeded.kind = WorkersOutcome::Kind::kSucceeded;
  for (const char* id : {"0", "1b", "2"}) {
    w.agents.at(id).machine->WorkersExited(succeeded, w.now);
    w.agents.at(id).action.reset();
  }
  w.Run(3000);
  for (const char* id : {"0", "1b", "2"}) {
    INFO(std::string(id));
    REQUIRE(w.ActionOf(id));
    CHECK(w.ActionOf(id)->kind == ActionKind::kExit);
    CHECK(w.ActionOf(id)->exit_code == 0);
  }
  w.agents.at("1").alive = true;  // SIGCONT, after the job's end
  w.Run(1000);
  const auto& a = w.ActionOf("1");
  REQUIRE(a);
  REQUIRE(a->kind == ActionKind::kExit);
  CHECK(a->exit_code == 0);  // the job's outcome
  CHECK(a->displaced);
  CHECK(a->message ==
        "node rank 1 was taken over by host-1b (10.0.0.1b, agent 1b) while this agent sent no "
        "keep-alive for 15 s (it was stopped or starved), and the job succeeded without this "
        "agent");
}

TEST_CASE(
    "claims: an arrival killed while it waits is not closed in; it counts again if it beats") {
  World w(3, 3, false);
  w.Start("0", -1);
  w.Start("1", -1);
  w.Run(1000);
  w.agents.at("1").alive = false;  // killed (or stopped) while it waits
  w.Run(16000);                    // past the keep-alive limit
  w.Start("2", -1);
  w.Run(3000);
  // Three arrived, but one is silent: no round with a dead member.
  CHECK_FALSE(w.ActionOf("0"));
  CHECK_FALSE(w.ActionOf("2"));
  CHECK(Has(w.coordinator_log,
            "host-1 (10.0.0.1, agent 1), which joined round 0, has sent no keep-alive for 15 s"));
  // The waiting agents' progress says so too (it said "3 of at least 3 nodes joined").
  w.Run(3000);
  CHECK_FALSE(w.ActionOf("2"));
  CHECK(Has(w.agents.at("2").told,
            "waiting for round 0: 2 of at least 3 nodes joined; seen: host-0 (10.0.0.0), host-2 "
            "(10.0.0.2); not counted, silent past the keep-alive limit (killed, or stopped): "
            "host-1 (10.0.0.1)"));
  SUBCASE("a new node fills the round") {
    w.Start("3", -1);
    w.Run(3000);
    RequireStarted(w, {"0", "2", "3"});
    for (const char* id : {"0", "2", "3"}) {
      for (const auto& n : w.ActionOf(id)->round.nodes) CHECK(n.agent_id != "1");
    }
  }
  SUBCASE("the stopped one comes back and is counted again") {
    w.agents.at("1").alive = true;
    w.Run(3000);
    RequireStarted(w, {"0", "1", "2"});
  }
}

TEST_CASE("claims: a member stopped by a signal frees its node rank for the agent in its place") {
  World w(2, 2, true);
  w.Start("0", 0);
  w.Start("1", 1);
  w.Run(1000);
  REQUIRE(w.ActionOf("1"));
  REQUIRE(w.ActionOf("1")->kind == ActionKind::kStartWorkers);
  // An agent for node rank 1 waits (uncounted: the rank is held) ...
  w.Start("1b", 1);
  w.Run(500);
  // ... when node 1's agent is stopped by SIGTERM: it frees the rank as it leaves.
  WorkersOutcome stopped;
  stopped.kind = WorkersOutcome::Kind::kInterrupted;
  stopped.signal = 15;
  stopped.signal_name = "SIGTERM";
  AgentMachine& one = *w.agents.at("1").machine;
  one.WorkersExited(stopped, w.now);
  REQUIRE(one.Step(*w.agents.at("1").kv, w.now).kind == ActionKind::kExit);
  w.agents.at("1").alive = false;
  // The new agent holds it at its next step, not after the keep-alive limit.
  (void)w.agents.at("1b").machine->Step(*w.agents.at("1b").kv, w.now + milliseconds(200));
  auto claim = w.kvc.TryGet(RendezvousKeys("t").Claim(1));
  REQUIRE(claim.ok());
  REQUIRE(claim->has_value());
  auto holder = NodeInfo::Decode(**claim);
  REQUIRE(holder.ok());
  CHECK(holder->agent_id == "1b");
  auto rec = ReadRecord(w.kvc, RendezvousKeys("t"));
  REQUIRE(rec.ok());
  CHECK_FALSE(rec->final());  // a membership change: the round re-forms with it
}

TEST_CASE("claims: a store host stopped past the limit does not make a live holder look dead") {
  World w(3, 3, true);
  w.Start("0", 0);
  w.Start("1", 1);
  w.Run(300);
  w.Start("1b", 1);  // a second agent for a rank whose holder is alive
  w.Run(300);
  // The store host is stopped for longer than the keep-alive limit: nobody
  // beats, nobody steps. The claimant happens to run first after it.
  w.now += std::chrono::seconds(16);
  w.StepOne("1b");
  CHECK_FALSE(Has(w.agents.at("1b").told, "was replaced"));
  w.Run(7000);
  for (const char* id : {"0", "1", "1b"}) {
    INFO(std::string(id));
    REQUIRE(w.ActionOf(id));
    CHECK(w.ActionOf(id)->message.find("node rank 1 was claimed twice") != std::string::npos);
  }
}

TEST_CASE("claims: an agent whose rank was taken over gets it back when the new one left") {
  World w(3, 3, true);
  StopNodeOneAndReplaceIt(w);
  REQUIRE(Has(w.agents.at("1b").told, "was replaced"));
  // The new agent is stopped by SIGTERM while it waits: it withdraws and
  // frees the rank.
  w.agents.at("1b").machine->Interrupted(15, "SIGTERM");
  w.StepOne("1b");
  REQUIRE(w.ActionOf("1b"));
  CHECK(w.ActionOf("1b")->exit_code == 143);
  w.agents.at("1b").alive = false;
  w.agents.at("1").alive = true;  // SIGCONT: the rank is free, so it is its own again
  w.Start("2", 2);
  w.Run(5000);
  RequireStarted(w, {"0", "1", "2"});
}

TEST_CASE("claims: a holder the job found lost is replaced at once, even if it beats again") {
  LocalStore store;
  auto kv = store.Connect();
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = rdzv.max_nodes = 2;
  rdzv.exclusive_ranks = true;
  const RendezvousKeys keys("t");
  NodeInfo zero = Member("0"), one = Member("1");
  zero.requested_rank = 0;
  one.requested_rank = 1;
  // Round 0 ran with both and ended: node 1 was lost (stopped past the limit).
  auto rec = CloseRound(JobRecord(), 0, {zero, one});
  REQUIRE(rec.ok());
  rec = EndRoundByMembership(*rec, 0, "lost host-1", "1", 1, {});
  REQUIRE(rec.ok());
  REQUIRE(kv.Set(keys.Job(), rec->Encode()).ok());
  REQUIRE(kv.Set(keys.Claim(1), one.Encode()).ok());
  AgentSettings s;
  s.rdzv = rdzv;
  s.self = Member("1b");
  s.self.requested_rank = 1;
  AgentMachine again(s);
  auto now = Clock::time_point(std::chrono::hours(1));
  (void)kv.Add(keys.KeepAlive("1"), 1);  // the old agent came back and beats
  Action first = again.Step(kv, now);
  CHECK(first.message.find("was replaced by host-1b") != std::string::npos);
  auto claim = kv.TryGet(keys.Claim(1));
  REQUIRE(claim.ok());
  REQUIRE(claim->has_value());
  CHECK(NodeInfo::Decode(**claim)->agent_id == "1b");
}

TEST_CASE("claims: a stray agent with other settings leaves a running static job alone") {
  World w(2, 2, true);
  w.Start("0", 0);
  w.Start("1", 1);
  w.Run(1000);
  REQUIRE(w.ActionOf("0"));
  REQUIRE(w.ActionOf("0")->kind == ActionKind::kStartWorkers);
  w.Start("2", 1, /*max_restarts=*/3);
  w.StepOne("2");
  REQUIRE(w.ActionOf("2"));
  CHECK(w.ActionOf("2")->exit_code == 2);
  auto rec = ReadRecord(w.kvc, RendezvousKeys("t"));
  REQUIRE(rec.ok());
  CHECK_FALSE(rec->final());
  CHECK(rec->Running(0));
}

}  // namespace
}  // namespace ddprun::rendezvous
