// The agent and coordinator machines over an in-process store, stepped by
// hand: what agents decide together (the simulation, tests/sim, does the
// same at random).
#include <doctest/doctest.h>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/coordinator_machine.hpp"
#include "tests/unit/rendezvous/record_test_util.hpp"
#include "tests/unit/rendezvous/two_agents.hpp"

namespace ddprun::rendezvous {
namespace {

using record_test::For;
using record_test::Member;
using record_test::WorkerCause;
using test::TwoAgents;

WorkersOutcome Failed(const Cause& cause) {
  WorkersOutcome o;
  o.kind = WorkersOutcome::Kind::kFailed;
  o.cause = cause;
  return o;
}

// A worker that died because a peer went away (SIGPIPE: 141; a reset connection).
WorkersOutcome PeerFailed(int exit_code) {
  Cause c;
  c.cls = FailureClass::kPeer;
  c.exit_code = exit_code;
  return Failed(c);
}

TEST_CASE("machines: a failure restarts both nodes with the same restart count") {
  TwoAgents t(1);
  auto [s0, s1] = t.Until();
  REQUIRE(s0.kind == ActionKind::kStartWorkers);
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  CHECK(s0.round.node_rank + s1.round.node_rank == 1);
  CHECK(s0.round.world_size == 4);
  WorkersOutcome failed = Failed(WorkerCause(3));
  t.a1->WorkersExited(failed, t.now);
  (void)t.a1->Step(t.kv1, t.now);  // records the failure
  CHECK(t.a0->Step(t.kv0, t.now).kind == ActionKind::kStopWorkers);
  WorkersOutcome stopped;
  stopped.kind = WorkersOutcome::Kind::kStopped;
  t.a0->WorkersExited(stopped, t.now);
  auto [r0, r1] = t.Until();
  REQUIRE(r0.kind == ActionKind::kStartWorkers);
  REQUIRE(r1.kind == ActionKind::kStartWorkers);
  CHECK(r0.round.restart_count == 1);
  CHECK(r1.round.restart_count == 1);
}

TEST_CASE("machines: the longest keep-alive limit the options allow still forms a round") {
  // 1e9 s x 10 attempts passed the clock's nanoseconds: every node was silent at once and no
  // round ever formed (attack 114).
  RendezvousSettings huge;
  huge.keep_alive_interval = std::chrono::seconds(1000000000);
  huge.keep_alive_max_attempt = 1 << 20;
  CHECK(huge.KeepAliveLimit() == RendezvousSettings::kLongestWait);
  TwoAgents t(0, huge);
  auto [s0, s1] = t.Until();
  CHECK(s0.kind == ActionKind::kStartWorkers);
  CHECK(s1.kind == ActionKind::kStartWorkers);
  RendezvousSettings usual;
  CHECK(usual.KeepAliveLimit() == std::chrono::seconds(15));
}

TEST_CASE("machines: signalled while a restart's round forms, an agent says what ended the last") {
  // Attack 95: a node's workers died of another's failure (victims), the job waited to restart,
  // and SIGTERM came: its report named its own victim alone. The exit carries the recorded end
  // when it was another node's doing; the node whose failure it was gets none.
  TwoAgents t(1);
  (void)t.Until();
  t.a1->WorkersExited(Failed(WorkerCause(3)), t.now);
  (void)t.a1->Step(t.kv1, t.now);  // records the failure and joins round 1
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kStopWorkers);
  t.a0->WorkersExited(PeerFailed(141), t.now);
  (void)t.a0->Step(t.kv0, t.now);  // follows the record into round 1
  REQUIRE(t.a0->phase() != AgentMachine::Phase::kExited);
  t.a0->Interrupted(15, "SIGTERM");
  const Action left0 = t.a0->Step(t.kv0, t.now);
  REQUIRE(left0.kind == ActionKind::kExit);
  CHECK(left0.exit_code == 128 + 15);
  CHECK(left0.round_ended.find("node 1") != std::string::npos);
  CHECK(left0.round_ended.find("exit code 3") != std::string::npos);
  t.a1->Interrupted(15, "SIGTERM");
  const Action left1 = t.a1->Step(t.kv1, t.now);
  REQUIRE(left1.kind == ActionKind::kExit);
  CHECK(left1.round_ended.empty());  // its own failure ended the round
}

TEST_CASE("machines: with no restarts left both agents exit with the root cause's code") {
  TwoAgents t(0);
  (void)t.Until();
  WorkersOutcome failed = Failed(WorkerCause(7));
  t.a1->WorkersExited(failed, t.now);
  Action e1 = t.a1->Step(t.kv1, t.now);
  REQUIRE(e1.kind == ActionKind::kExit);
  CHECK(e1.exit_code == 7);
  CHECK(e1.failed);
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kStopWorkers);
  // Its own worker died of the broken connection: not the root cause.
  WorkersOutcome peer = PeerFailed(141);
  t.a0->WorkersExited(peer, t.now);
  Action e0 = t.a0->Step(t.kv0, t.now);
  REQUIRE(e0.kind == ActionKind::kExit);
  CHECK(e0.exit_code == 7);
  CHECK(e0.message == e1.message);
}

TEST_CASE("machines: an agent signalled in a restart's rendezvous is not counted in the round") {
  TwoAgents t(2);
  (void)t.Until();
  WorkersOutcome failed = Failed(WorkerCause(3));
  t.a1->WorkersExited(failed, t.now);
  (void)t.a1->Step(t.kv1, t.now);  // records the failure and joins round 1
  REQUIRE(t.a1->phase() == AgentMachine::Phase::kWaitRound);
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kStopWorkers);
  // Node 0's workers take their grace to stop; node 1's agent gets SIGTERM meanwhile.
  t.a1->Interrupted(15, "SIGTERM");
  Action left = t.a1->Step(t.kv1, t.now);
  REQUIRE(left.kind == ActionKind::kExit);
  CHECK(left.exit_code == 143);
  WorkersOutcome stopped;
  stopped.kind = WorkersOutcome::Kind::kStopped;
  t.now += std::chrono::seconds(10);
  t.a0->WorkersExited(stopped, t.now);
  Action a0 = t.a0->Step(t.kv0, t.now);
  for (int i = 0; i < 20 && a0.kind == ActionKind::kWait; ++i) {
    t.now += std::chrono::milliseconds(50);
    (void)t.coordinator->Step(t.kvc, t.now);
    a0 = t.a0->Step(t.kv0, t.now);
  }
  // Not a round of two with a departed node: with a restart left, the round waits for
  // another node (as torchrun's), up to join_timeout; then the job ends, naming why.
  REQUIRE(a0.kind == ActionKind::kWait);
  CHECK(t.a0->phase() == AgentMachine::Phase::kWaitRound);
  // Stepped as the driver does (a longer gap is taken for a pause, which the timeout leaves out).
  for (int i = 0; i < 700 && a0.kind == ActionKind::kWait; ++i) {
    t.now += std::chrono::seconds(1);
    (void)t.coordinator->Step(t.kvc, t.now);
    a0 = t.a0->Step(t.kv0, t.now);
  }
  REQUIRE(a0.kind == ActionKind::kExit);
  CHECK(a0.exit_code == 1);
  CHECK(a0.message.find("timed out after 600 s (join_timeout): 1 of at least 2 nodes joined") !=
        std::string::npos);
  // Without a restart left, the job ends at once.
  TwoAgents none(1);
  (void)none.Until();
  none.a1->WorkersExited(failed, none.now);
  (void)none.a1->Step(none.kv1, none.now);
  REQUIRE(none.a1->phase() == AgentMachine::Phase::kWaitRound);
  REQUIRE(none.a0->Step(none.kv0, none.now).kind == ActionKind::kStopWorkers);
  none.a1->Interrupted(15, "SIGTERM");
  REQUIRE(none.a1->Step(none.kv1, none.now).kind == ActionKind::kExit);
  none.now += std::chrono::seconds(10);
  none.a0->WorkersExited(stopped, none.now);
  a0 = none.a0->Step(none.kv0, none.now);
  REQUIRE(a0.kind == ActionKind::kExit);
  CHECK(a0.exit_code == 1);
  CHECK(a0.message ==
        "the job failed: the agent on host-1 (1, joining round 1) was stopped by SIGTERM; 1 "
        "node(s) remain, fewer than the minimum of 2 (--nnodes), and no restart is left "
        "(--max_restarts=1) to wait for another node: start the job again with every node, or "
        "give --nnodes a lower minimum so that it goes on without one (the last restart was "
        "used after node 1 (host-1): rank 3 (local_rank 1, pid 4242) exit code 3)");
}

TEST_CASE("machines: a peer-class failure waits for the failure that caused it") {
  TwoAgents t(0);
  (void)t.Until();
  WorkersOutcome peer = PeerFailed(141);
  t.a0->WorkersExited(peer, t.now);
  CHECK(t.a0->Step(t.kv0, t.now).kind == ActionKind::kWait);  // settling
  WorkersOutcome failed = Failed(WorkerCause(4));
  t.a1->WorkersExited(failed, t.now + std::chrono::milliseconds(500));
  CHECK(t.a1->Step(t.kv1, t.now + std::chrono::milliseconds(500)).exit_code == 4);
  Action e0 = t.a0->Step(t.kv0, t.now + std::chrono::milliseconds(600));
  REQUIRE(e0.kind == ActionKind::kExit);
  CHECK(e0.exit_code == 4);
}

TEST_CASE("machines: a failure is recorded as its node's workers begin to stop, not after") {
  // Attack 81: node 1 recorded its failure only after its workers' grace; node 0's workers ran
  // on, failed of the lost peer and were recorded first (the wrong root cause).
  TwoAgents t(0);
  (void)t.Until();
  WorkersOutcome failed = Failed(WorkerCause(7));
  t.a1->FailedEarly(failed, t.now);
  CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);  // recorded; its workers stop
  const Action stop = t.a0->Step(t.kv0, t.now + std::chrono::milliseconds(10));
  REQUIRE(stop.kind == ActionKind::kStopWorkers);
  CHECK(stop.message.find("round 0 ended: failure on node 1") != std::string::npos);
  // Node 0's workers then fail of the lost peer: recorded after, not the root cause.
  WorkersOutcome peer = PeerFailed(1);
  t.a0->WorkersExited(peer, t.now + std::chrono::milliseconds(20));
  const Action e0 = t.a0->Step(t.kv0, t.now + std::chrono::milliseconds(20));
  REQUIRE(e0.kind == ActionKind::kExit);
  CHECK(e0.exit_code == 7);
  // Node 1's workers end 10 s later (the grace): the same one root cause.
  t.a1->WorkersExited(failed, t.now + std::chrono::seconds(10));
  const Action e1 = t.a1->Step(t.kv1, t.now + std::chrono::seconds(10));
  REQUIRE(e1.kind == ActionKind::kExit);
  CHECK(e1.exit_code == 7);
  CHECK(e1.message == e0.message);
}

TEST_CASE("machines: an agent signalled while its failed workers stop leaves, never rejoins") {
  // Attack 82: it joined the restart's round, which closed with it and started the other
  // node's workers, only to stop them at once.
  TwoAgents t(1);
  (void)t.Until();
  WorkersOutcome failed = Failed(WorkerCause(7));
  t.a1->FailedEarly(failed, t.now);
  CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kStopWorkers);
  WorkersOutcome stopped;
  stopped.kind = WorkersOutcome::Kind::kStopped;
  t.a0->WorkersExited(stopped, t.now);
  t.a1->Interrupted(15, "SIGTERM");  // during its grace
  t.a1->WorkersExited(failed, t.now + std::chrono::seconds(5));
  const Action left = t.a1->Step(t.kv1, t.now + std::chrono::seconds(5));
  REQUIRE(left.kind == ActionKind::kExit);
  CHECK(left.exit_code == 128 + 15);
  // Node 0 never starts round 1's workers: alone below the minimum, no restart left.
  for (int i = 0; i < 20; ++i) {
    const Action a0 = t.a0->Step(t.kv0, t.now + std::chrono::seconds(5));
    REQUIRE(a0.kind != ActionKind::kStartWorkers);
    REQUIRE(a0.kind != ActionKind::kClearWorkerStore);
    if (a0.kind == ActionKind::kExit) {
      CHECK(a0.exit_code == 1);
      CHECK(a0.message.find("was stopped by SIGTERM") != std::string::npos);
      return;
    }
  }
  FAIL("node 0 neither exited nor started workers");
}

TEST_CASE("machines: a peer-class or settling failure is not recorded early") {
  TwoAgents t(0);
  (void)t.Until();
  WorkersOutcome peer = PeerFailed(141);
  t.a1->FailedEarly(peer, t.now);
  WorkersOutcome settling = Failed(WorkerCause(3));
  settling.settle = true;
  t.a0->FailedEarly(settling, t.now);
  CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);
  CHECK(t.a0->Step(t.kv0, t.now).kind == ActionKind::kWait);  // still running: nothing ended
  CHECK(t.a0->phase() == AgentMachine::Phase::kRunning);
  CHECK(t.a1->phase() == AgentMachine::Phase::kRunning);
}

TEST_CASE("machines: a hang whose ranks all wait in a collective lets the other node's go first") {
  // Found by an attacking helper: with a rank stalled on node 1 and node 0's rank waiting for it
  // inside an all-reduce, whichever agent recorded its hang first was the root cause.
  TwoAgents t(0);
  (void)t.Until();
  WorkersOutcome waiting;
  waiting.kind = WorkersOutcome::Kind::kFailed;
  waiting.cause.cls = FailureClass::kHang;
  waiting.cause.exit_code = 124;
  waiting.cause.what = "rank 0 hung";
  waiting.settle = true;
  t.a0->WorkersExited(waiting, t.now);
  CHECK(t.a0->Step(t.kv0, t.now).kind == ActionKind::kWait);  // settling
  WorkersOutcome stalled = waiting;
  stalled.settle = false;
  stalled.cause.what = "rank 1 hung";
  t.a1->WorkersExited(stalled, t.now + std::chrono::milliseconds(300));
  const Action e1 = t.a1->Step(t.kv1, t.now + std::chrono::milliseconds(300));
  REQUIRE(e1.kind == ActionKind::kExit);
  Action e0 = t.a0->Step(t.kv0, t.now + std::chrono::milliseconds(400));
  REQUIRE(e0.kind == ActionKind::kExit);
  CHECK(e0.exit_code == 124);
  CHECK(e0.message == e1.message);
  CHECK(e0.message.find("rank 1 hung") != std::string::npos);
}

TEST_CASE("machines: an agent whose --nnodes or --max_restarts differ from the job's is refused") {
  LocalStore store;
  auto kv0 = store.Connect(), kv1 = store.Connect(), kv2 = store.Connect();
  AgentSettings s;
  s.rdzv.run_id = "t";
  s.rdzv.min_nodes = 1;
  s.rdzv.max_nodes = 3;
  s.rdzv.max_restarts = 2;
  s.self = Member("0");
  AgentMachine first(s);
  s.self = Member("1");
  AgentMachine same(s);
  s.self = Member("2");
  s.rdzv.max_restarts = 0;
  AgentMachine other(s);
  auto now = Clock::time_point(std::chrono::hours(1));
  CHECK(first.Step(kv0, now).kind == ActionKind::kWait);
  CHECK(same.Step(kv1, now).kind == ActionKind::kWait);
  Action refused = other.Step(kv2, now);
  REQUIRE(refused.kind == ActionKind::kExit);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.rfind(
            "this node's --nnodes=1:3 --max_restarts=0 differ from the job's --nnodes=1:3 "
            "--max_restarts=2 (given by the first agent to join, on host-0)",
            0) == 0);
  // Another --role: ROLE_RANK and ROLE_WORLD_SIZE would count ranks of both roles.
  s.self = Member("3");
  s.rdzv.max_restarts = 2;
  s.role = "trainer";
  AgentMachine role(s);
  auto kv3 = store.Connect();
  Action mixed = role.Step(kv3, now);
  REQUIRE(mixed.kind == ActionKind::kExit);
  CHECK(mixed.message.rfind("this node's --nnodes=1:3 --max_restarts=2 --role=trainer differ", 0) ==
        0);
  CHECK(mixed.message.find("one role per job") != std::string::npos);
}

TEST_CASE("machines: under static, a node refused for other settings fails the whole job") {
  LocalStore store;
  auto kv0 = store.Connect(), kv1 = store.Connect();
  AgentSettings s;
  s.rdzv.run_id = "t";
  s.rdzv.min_nodes = s.rdzv.max_nodes = 2;
  s.rdzv.exclusive_ranks = true;
  s.self = Member("0");
  s.self.requested_rank = 0;
  AgentMachine first(s);
  s.self = Member("1");
  s.self.requested_rank = 1;
  s.rdzv.max_restarts = 2;
  AgentMachine other(s);
  auto now = Clock::time_point(std::chrono::hours(1));
  CHECK(first.Step(kv0, now).kind == ActionKind::kWait);
  Action refused = other.Step(kv1, now);
  REQUIRE(refused.kind == ActionKind::kExit);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.rfind("this node's --nnodes=2 --max_restarts=2 differ", 0) == 0);
  // The job cannot form without it: node 0 learns why at its next step, not
  // at the join timeout.
  Action told = first.Step(kv0, now + std::chrono::milliseconds(200));
  REQUIRE(told.kind == ActionKind::kExit);
  CHECK(told.exit_code == 2);
  CHECK(told.message.rfind("the job failed: the node host-1 (10.0.0.1) was refused: its "
                           "--nnodes=2 --max_restarts=2 differ from the job's --nnodes=2 "
                           "--max_restarts=0",
                           0) == 0);
}

TEST_CASE("machines: an agent's own claim is no conflict when it joins again") {
  LocalStore store;
  auto kv = store.Connect();
  AgentSettings s;
  s.rdzv.run_id = "t";
  s.rdzv.min_nodes = s.rdzv.max_nodes = 2;
  s.rdzv.exclusive_ranks = true;
  s.self = Member("1");
  s.self.requested_rank = 1;
  AgentMachine first(s);
  auto now = Clock::time_point(std::chrono::hours(1));
  CHECK(first.Step(kv, now).kind == ActionKind::kWait);
  // The same agent (same NodeInfo) after a restart of its machine: still its rank.
  AgentMachine again(s);
  CHECK(again.Step(kv, now).kind == ActionKind::kWait);
}

TEST_CASE("machines: a forming round tells who joined after 5 s, then every 30 s, until it forms") {
  LocalStore store;
  auto kv0 = store.Connect(), kv1 = store.Connect(), kvc = store.Connect();
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = rdzv.max_nodes = 2;
  AgentSettings s;
  s.rdzv = rdzv;
  s.self = Member("0");
  s.self.name = "host-a";
  s.hosts_store = true;
  AgentMachine a0(s);
  CoordinatorMachine coordinator(rdzv, "0", [](const std::string&) {});
  const auto start = Clock::time_point(std::chrono::hours(1));
  std::vector<std::string> told;
  for (int ms = 0; ms <= 40000; ms += 100) {
    const auto now = start + std::chrono::milliseconds(ms);
    (void)coordinator.Step(kvc, now);
    Action a = a0.Step(kv0, now);
    REQUIRE(a.kind == ActionKind::kWait);
    if (!a.message.empty()) told.push_back(std::to_string(ms) + " " + a.message);
  }
  REQUIRE(told.size() == 2);
  CHECK(told[0].rfind("5000 waiting for round 0: 1 of at least 2 nodes joined; seen: host-a", 0) ==
        0);
  CHECK(told[0].find("join_timeout ends the wait in 595 s") != std::string::npos);
  CHECK(told[1].rfind("35000 ", 0) == 0);
  // The second node comes: the round forms, and nothing more is told.
  s.self = Member("1");
  s.hosts_store = false;
  AgentMachine a1(s);
  auto now = start + std::chrono::seconds(41);
  for (int i = 0; i < 50 && a0.phase() == AgentMachine::Phase::kWaitRound; ++i) {
    now += std::chrono::milliseconds(100);
    (void)coordinator.Step(kvc, now);
    (void)a1.Step(kv1, now);
    CHECK(a0.Step(kv0, now).message.empty());
  }
  CHECK(a0.phase() != AgentMachine::Phase::kWaitRound);
}

TEST_CASE("machines: the store host logs each withdrawal once, also when a rejoin came with it") {
  LocalStore store;
  auto kvc = store.Connect(), kvw = store.Connect();
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = rdzv.max_nodes = 3;
  std::vector<std::string> logged;
  CoordinatorMachine coordinator(rdzv, "0", [&](const std::string& l) { logged.push_back(l); });
  const RendezvousKeys keys(rdzv.run_id);
  auto now = Clock::time_point(std::chrono::hours(1));
  const auto step = [&] {
    now += std::chrono::milliseconds(200);
    (void)coordinator.Step(kvc, now);
  };
  const auto apply = [&](const Transition& t) { REQUIRE(ApplyTransition(kvw, keys, t).ok()); };
  const auto withdraw = [&](const std::string& id) {
    apply([&](const JobRecord& r) { return Withdraw(r, 0, id, "agent " + id + " left", 1); });
  };
  withdraw("a");
  withdraw("b");
  step();
  step();
  CHECK(logged == std::vector<std::string>{
                      "rendezvous: agent a left before round 0 formed: it forms without it",
                      "rendezvous: agent b left before round 0 formed: it forms without it"});
  // "a" holds its rank again and "c" withdraws before the store host looks:
  // the list is as long as before, and "c" is still told.
  apply([&](const JobRecord& r) { return Rejoin(r, 0, "a"); });
  withdraw("c");
  step();
  step();
  REQUIRE(logged.size() == 3);
  CHECK(logged[2] == "rendezvous: agent c left before round 0 formed: it forms without it");
}

TEST_CASE("machines: a round with enough nodes tells that the last call waits for more") {
  LocalStore store;
  auto kv0 = store.Connect(), kvc = store.Connect();
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = 1;
  rdzv.max_nodes = 2;
  rdzv.last_call_timeout = std::chrono::seconds(30);
  AgentMachine a0(For(rdzv, "0"));
  CoordinatorMachine coordinator(rdzv, "0", [](const std::string&) {});
  const auto start = Clock::time_point(std::chrono::hours(1));
  std::string told;
  for (int ms = 0; ms <= 6000 && told.empty(); ms += 100) {
    const auto now = start + std::chrono::milliseconds(ms);
    (void)coordinator.Step(kvc, now);
    told = a0.Step(kv0, now).message;
  }
  CHECK(told.rfind("waiting for round 0: 1 of 1 to 2 nodes joined; the round forms when 2 have or "
                   "last_call_timeout (30 s) runs out; seen: host-0",
                   0) == 0);
}

TEST_CASE("machines: a late joiner is told the job is finishing, and how it ended") {
  LocalStore store;
  auto kv0 = store.Connect(), kv1 = store.Connect(), kv2 = store.Connect(), kvc = store.Connect();
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = 2;
  rdzv.max_nodes = 3;
  rdzv.last_call_timeout = std::chrono::seconds(1);
  AgentMachine a0(For(rdzv, "0")), a1(For(rdzv, "1")), a2(For(rdzv, "2"));
  CoordinatorMachine coordinator(rdzv, "0", [](const std::string&) {});
  auto now = Clock::time_point(std::chrono::hours(1));
  auto step_all = [&](AgentMachine& m, LocalStore::Handle& kv) {
    (void)coordinator.Step(kvc, now);
    Action a = m.Step(kv, now);
    if (a.kind == ActionKind::kClearWorkerStore) m.WorkerStoreCleared();
    return a;
  };
  for (int i = 0; i < 40; ++i, now += std::chrono::milliseconds(100)) {
    (void)step_all(a0, kv0);
    (void)step_all(a1, kv1);
  }
  REQUIRE(a0.phase() == AgentMachine::Phase::kRunning);
  REQUIRE(a1.phase() == AgentMachine::Phase::kRunning);
  WorkersOutcome ok;
  a0.WorkersExited(ok, now);
  (void)step_all(a0, kv0);  // node 0's workers finished
  std::string told;
  for (int i = 0; i < 60 && told.empty(); ++i, now += std::chrono::milliseconds(100)) {
    told = step_all(a2, kv2).message;
    (void)step_all(a1, kv1);
  }
  CHECK(told.rfind("waiting to join: the job runs round 0 with 2 of at most 3 nodes, and the "
                   "workers of 1 of them finished: no new round forms now",
                   0) == 0);
  a1.WorkersExited(ok, now);
  (void)step_all(a1, kv1);
  Action end = step_all(a2, kv2);
  REQUIRE(end.kind == ActionKind::kExit);
  CHECK(end.exit_code == 0);
  // Attack 80: a second job started on a busy endpoint with the default run id joined this
  // one and exited 0: the message says how to keep jobs apart.
  CHECK(end.message.rfind("the job succeeded while this agent waited to join round 1: no worker "
                          "ran here (meant as a job of its own? give it an --rdzv_id or "
                          "--rdzv_endpoint of its own: run id ",
                          0) == 0);
}

TEST_CASE("machines: a coordinator's own pause does not count against the join timeout") {
  LocalStore store;
  auto kv0 = store.Connect(), kvc = store.Connect(), observer = store.Connect();
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = rdzv.max_nodes = 2;
  rdzv.join_timeout = std::chrono::seconds(20);
  AgentMachine a0(For(rdzv, "0"));
  CoordinatorMachine coordinator(rdzv, "0", [](const std::string&) {});
  const auto start = Clock::time_point(std::chrono::hours(1));
  for (int ms = 0; ms <= 5000; ms += 100) {
    (void)coordinator.Step(kvc, start + std::chrono::milliseconds(ms));
    (void)a0.Step(kv0, start + std::chrono::milliseconds(ms));
  }
  // SIGSTOP of the store host for 30 s (past the join timeout), then it runs again.
  const auto resumed = start + std::chrono::seconds(35);
  (void)coordinator.Step(kvc, resumed);
  auto rec = ReadRecord(observer, RendezvousKeys("t"));
  REQUIRE(rec.ok());
  CHECK_FALSE(rec->final());  // 5 s of the 20 had passed when it stopped
  int failed_at = -1;
  for (int ms = 100; ms <= 20000 && failed_at < 0; ms += 100) {
    (void)coordinator.Step(kvc, resumed + std::chrono::milliseconds(ms));
    if (ReadRecord(observer, RendezvousKeys("t"))->final()) failed_at = ms;
  }
  // The 15 s left, less the poll (0.2 s) it asked to sleep before its next step: its pause
  // counts from that wake, as it may have run until then.
  CHECK(failed_at >= 14700);
  CHECK(failed_at <= 15200);
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

// What an agent says while round 0 forms: 2 of 3 nodes joined, asking for `ranks`.
std::string Forming(std::vector<int> ranks, bool exclusive_ranks = false) {
  LocalStore store;
  RendezvousSettings rdzv;
  rdzv.exclusive_ranks = exclusive_ranks;
  rdzv.run_id = "t";
  rdzv.min_nodes = rdzv.max_nodes = 3;
  std::vector<LocalStore::Handle> kvs;
  std::vector<AgentMachine> agents;
  for (size_t i = 0; i < ranks.size(); ++i) {
    AgentSettings s = For(rdzv, std::to_string(i));
    s.self.requested_rank = ranks[i];
    agents.emplace_back(s);
    kvs.push_back(store.Connect());
  }
  auto now = Clock::time_point(std::chrono::hours(1));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < agents.size(); ++i) (void)agents[i].Step(kvs[i], now);
    now += std::chrono::milliseconds(100);
  }
  auto rec = ReadRecord(kvs[0], RendezvousKeys("t"));
  REQUIRE(rec.ok());
  return JoinTimeoutReport(kvs[0], RendezvousKeys("t"), rdzv, *rec, 0);
}

TEST_CASE("machines: a forming round names missing node ranks only when they are known") {
  CHECK(Forming({0, 2}).find("missing node ranks: 1") != std::string::npos);
  // Found by an attacking helper: two agents asking for rank 1 were reported as missing
  // ranks 0 and 2, where one node was missing (the second takes a free rank).
  const std::string twice = Forming({1, 1});
  CHECK(twice.find("2 of at least 3 nodes joined") != std::string::npos);
  CHECK(twice.find("missing node ranks") == std::string::npos);
  CHECK(Forming({1, -1}).find("missing node ranks") == std::string::npos);
}

TEST_CASE("machines: a static round's timeout names static's own setting and advice") {
  // A static user was told to "raise join_timeout" and lower --nnodes's minimum (attack 114).
  const std::string timed_out = Forming({0, 2}, true);
  CHECK(timed_out.find("(--rdzv_conf timeout): 2 of at least 3 nodes joined") != std::string::npos);
  CHECK(timed_out.find("or raise timeout in --rdzv_conf") != std::string::npos);
  CHECK(timed_out.find("join_timeout") == std::string::npos);
  CHECK(timed_out.find("lower minimum") == std::string::npos);
  CHECK(Forming({0, 2}).find("raise join_timeout in --rdzv_conf") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::rendezvous
