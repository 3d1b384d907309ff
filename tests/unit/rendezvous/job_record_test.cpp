#include "rendezvous/job_record.hpp"

#include <doctest/doctest.h>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/coordinator_machine.hpp"

namespace ddprun::rendezvous {
namespace {

NodeInfo Member(const std::string& id) {
  NodeInfo n;
  n.agent_id = id;
  n.name = "host-" + id;
  n.addr = "10.0.0." + id;
  n.nproc = 2;
  return n;
}

// An agent of `rdzv` named `id`; agent "0" hosts the store.
AgentSettings For(const RendezvousSettings& rdzv, const std::string& id) {
  AgentSettings s;
  s.rdzv = rdzv;
  s.self = Member(id);
  s.hosts_store = id == "0";
  return s;
}

Cause WorkerCause(int code) {
  Cause c;
  c.cls = FailureClass::kWorker;
  c.exit_code = code;
  c.node_rank = 1;
  c.node = "host-b";
  c.rank = 3;
  c.local_rank = 1;
  c.pid = 4242;
  c.what = "rank 3 (local_rank 1, pid 4242) exit code " + std::to_string(code);
  return c;
}

JobRecord Closed(int members) {
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < members; ++i) nodes.push_back(Member(std::to_string(i)));
  auto rec = CloseRound(JobRecord(), 0, nodes);
  REQUIRE(rec.ok());
  return *rec;
}

TEST_CASE("a worker hung at exit fails the job with restarts left: its program had finished") {
  JobRecord rec = Closed(2);
  Cause c = WorkerCause(124);
  c.cls = FailureClass::kExitHang;
  auto ended = EndRoundByFailure(rec, 0, c, 3);
  REQUIRE(ended.ok());
  CHECK(ended->final());
  CHECK(ended->exit_code() == 124);
  auto back = JobRecord::Decode(ended->Encode());
  REQUIRE(back.ok());
  CHECK(back->final_cause.cls == FailureClass::kExitHang);
  CHECK(std::string(FailureClassName(back->final_cause.cls)) == "exit-hang");
  // A hang while training is restarted as any failure.
  c.cls = FailureClass::kHang;
  auto restarted = EndRoundByFailure(rec, 0, c, 3);
  REQUIRE(restarted.ok());
  CHECK_FALSE(restarted->final());
}

TEST_CASE("the job record survives encoding, any text in its messages included") {
  JobRecord rec = Closed(3);
  auto ended = EndRoundByFailure(rec, 0, WorkerCause(7), 0);
  REQUIRE(ended.ok());
  ended->end_reason = "odd: \t\n 12:colons: \x01";
  auto back = JobRecord::Decode(ended->Encode());
  REQUIRE(back.ok());
  CHECK(back->Encode() == ended->Encode());
  CHECK(back->members.size() == 3);
  CHECK(back->final_cause.what == "rank 3 (local_rank 1, pid 4242) exit code 7");
  CHECK(back->end_reason == ended->end_reason);
  CHECK(JobRecord::Decode("").ok());  // nothing written yet
  CHECK(JobRecord::Decode("").value().round == -1);
  CHECK_FALSE(JobRecord::Decode("garbage").ok());
  std::string truncated = ended->Encode();
  truncated.pop_back();
  CHECK_FALSE(JobRecord::Decode(truncated).ok());
}

TEST_CASE(
    "an agent that left a gathering round is never closed in; its withdrawal is the round's") {
  JobRecord rec = Closed(3);
  auto ended = EndRoundByFailure(rec, 0, WorkerCause(3), 2);
  REQUIRE(ended.ok());
  // Only the gathering round (1) can be left; round 0 is closed.
  CHECK_FALSE(Withdraw(*ended, 0, "2", "x", 1).ok());
  CHECK_FALSE(Withdraw(*ended, 2, "2", "x", 1).ok());
  auto left = Withdraw(*ended, 1, "2", "the agent on host-2 (2, joining round 1) was stopped", 2);
  REQUIRE(left.ok());
  CHECK_FALSE(left->final());  // members 0 and 1 remain: --nnodes=2 can go on
  CHECK(left->Withdrew("2"));
  CHECK_FALSE(Withdraw(*left, 1, "2", "again", 2).ok());
  auto back = JobRecord::Decode(left->Encode());
  REQUIRE(back.ok());
  REQUIRE(back->withdrawn.size() == 1);
  CHECK(back->withdrawn[0].reason == "the agent on host-2 (2, joining round 1) was stopped");
  // Closing round 1 with it is refused; without it, the withdrawals are over.
  CHECK_FALSE(CloseRound(*left, 1, {Member("0"), Member("1"), Member("2")}).ok());
  auto closed = CloseRound(*left, 1, {Member("0"), Member("1")});
  REQUIRE(closed.ok());
  CHECK(closed->withdrawn.empty());
  // A member of round 0 leaving so that fewer than MIN remain fails the job, as from a round.
  auto second = Withdraw(*left, 1, "1", "the agent on host-1 was stopped by SIGTERM", 2);
  REQUIRE(second.ok());
  CHECK(second->final());
  CHECK(second->final_cause.what ==
        "the agent on host-1 was stopped by SIGTERM; 1 node(s) remain, fewer than the minimum "
        "of 2 (--nnodes)");
  // A new node that joined round 1 counts: the two can form it (rounds end for new nodes so).
  auto with_newcomer = Withdraw(*left, 1, "1", "the agent on host-1 was stopped by SIGTERM", 2,
                                {"0", "1", "2", "7"});
  REQUIRE(with_newcomer.ok());
  CHECK_FALSE(with_newcomer->final());
  // So does one waiting while a round runs, when a member of it is lost.
  JobRecord running = Closed(2);
  CHECK(EndRoundByMembership(running, 0, "lost host-1", "1", 2)->final());
  CHECK_FALSE(EndRoundByMembership(running, 0, "lost host-1", "1", 2, {"7"})->final());
  // An agent that was in no round before only withdraws: others may still come.
  auto first = Withdraw(JobRecord(), 0, "5", "x", 2);
  REQUIRE(first.ok());
  CHECK_FALSE(first->final());
}

TEST_CASE("a record of another ddprun version is named as such, not as malformed") {
  std::string text = Closed(2).Encode();
  const std::string magic = "ddprun-job/2";
  REQUIRE(text.find(magic) != std::string::npos);
  text.replace(text.find(magic), magic.size(), "ddprun-job/1");
  auto rec = JobRecord::Decode(text);
  REQUIRE_FALSE(rec.ok());
  CHECK(rec.status().message() ==
        "rendezvous: the job record is ddprun-job/1, this ddprun reads ddprun-job/2: run the "
        "same ddprun version on every node");
}

TEST_CASE("a failure uses one restart; the one past --max_restarts fails the job for good") {
  JobRecord rec = Closed(2);
  auto first = EndRoundByFailure(rec, 0, WorkerCause(3), 1);
  REQUIRE(first.ok());
  CHECK(first->restarts == 1);
  CHECK_FALSE(first->final());
  // A second failure of the same round is a consequence: rejected.
  CHECK_FALSE(EndRoundByFailure(*first, 0, WorkerCause(9), 1).ok());
  auto next = CloseRound(*first, 1, first->members);
  REQUIRE(next.ok());
  CHECK(next->restarts == 1);  // what round 1's workers see
  auto last = EndRoundByFailure(*next, 1, WorkerCause(5), 1);
  REQUIRE(last.ok());
  CHECK(last->final());
  CHECK(last->exit_code() == 5);
  // Final: nothing changes it any more.
  CHECK_FALSE(CloseRound(*last, 2, last->members).ok());
  CHECK_FALSE(MarkDone(*last, 1, 0).ok());
  CHECK_FALSE(CloseJob(*last, WorkerCause(1)).ok());
}

TEST_CASE("membership changes use no restart; fewer than MIN remaining fails the job") {
  JobRecord rec = Closed(3);
  auto lost = EndRoundByMembership(rec, 0, "lost host-2", "2", 2);
  REQUIRE(lost.ok());
  CHECK(lost->restarts == 0);
  CHECK_FALSE(lost->final());
  auto too_few = EndRoundByMembership(rec, 0, "lost host-2", "2", 3);
  REQUIRE(too_few.ok());
  CHECK(too_few->final());
  CHECK(too_few->exit_code() == 1);
  CHECK(too_few->final_cause.cls == FailureClass::kRendezvous);
}

TEST_CASE("a member whose workers finished is never lost; all finished is success") {
  JobRecord rec = Closed(2);
  auto one = MarkDone(rec, 0, 1);
  REQUIRE(one.ok());
  CHECK_FALSE(one->final());
  CHECK_FALSE(EndRoundByMembership(*one, 0, "lost", "1", 1).ok());
  auto both = MarkDone(*one, 0, 0);
  REQUIRE(both.ok());
  CHECK(both->outcome == JobOutcome::kSucceeded);
  CHECK(both->exit_code() == 0);
  CHECK_FALSE(EndRoundByFailure(*both, 0, WorkerCause(1), 3).ok());
}

TEST_CASE("membership changes end a round softly: workers that had finished still count") {
  JobRecord rec = Closed(2);
  auto ended = EndRoundForNewNodes(rec, 0, "1 new node(s) waiting to join");
  REQUIRE(ended.ok());
  CHECK(ended->restarts == 0);
  auto one = MarkDone(*ended, 0, 0);
  REQUIRE(one.ok());
  CHECK_FALSE(one->final());
  auto both = MarkDone(*one, 0, 1);
  REQUIRE(both.ok());
  CHECK(both->outcome == JobOutcome::kSucceeded);
  // Once the next round closed, round 0 is history.
  auto next = CloseRound(*one, 1, one->members);
  REQUIRE(next.ok());
  CHECK_FALSE(MarkDone(*next, 0, 1).ok());
  // A loss is soft too (the lost node may come back having finished); a
  // failure is not.
  auto lost = EndRoundByMembership(rec, 0, "lost", "1", 1);
  REQUIRE(lost.ok());
  CHECK(MarkDone(*lost, 0, 0).ok());
  auto failed = EndRoundByFailure(rec, 0, WorkerCause(3), 1);
  REQUIRE(failed.ok());
  CHECK_FALSE(MarkDone(*failed, 0, 0).ok());
}

TEST_CASE("a member lost after others finished is not awaited; the rest still are") {
  JobRecord rec = Closed(3);
  CHECK_FALSE(ExcuseLost(rec, 0, "lost", "2").ok());  // nobody finished: a membership change
  auto one = MarkDone(rec, 0, 0);
  REQUIRE(one.ok());
  CHECK_FALSE(ExcuseLost(*one, 0, "lost", "0").ok());  // it finished: not lost
  auto excused = ExcuseLost(*one, 0, "lost host-2", "2");
  REQUIRE(excused.ok());
  CHECK_FALSE(excused->final());  // member 1's workers still run
  CHECK(excused->Running(0));
  CHECK(excused->restarts == 0);
  auto back = JobRecord::Decode(excused->Encode());
  REQUIRE(back.ok());
  CHECK(back->gone == std::vector<bool>{false, false, true});
  CHECK(back->gone_reason == "lost host-2");
  auto done = MarkDone(*excused, 0, 1);
  REQUIRE(done.ok());
  CHECK(done->outcome == JobOutcome::kSucceeded);
  CHECK(done->exit_code() == 0);
}

TEST_CASE("compare-and-set: the first of two racing transitions wins, the second sees it") {
  LocalStore store;
  auto a = store.Connect();
  auto b = store.Connect();
  RendezvousKeys keys("job");
  std::vector<NodeInfo> members{Member("0"), Member("1")};
  auto closed =
      ApplyTransition(a, keys, [&](const JobRecord& r) { return CloseRound(r, 0, members); });
  REQUIRE(closed.ok());
  CHECK(closed->landed);
  auto first = ApplyTransition(
      a, keys, [](const JobRecord& r) { return EndRoundByFailure(r, 0, WorkerCause(3), 0); });
  auto second = ApplyTransition(
      b, keys, [](const JobRecord& r) { return EndRoundByFailure(r, 0, WorkerCause(9), 0); });
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first->landed);
  CHECK_FALSE(second->landed);
  CHECK(second->record.exit_code() == 3);
  auto read = ReadRecord(b, keys);
  REQUIRE(read.ok());
  CHECK(read->final_cause.exit_code == 3);
}

// Two agents and the coordinator on one in-process store, stepped by hand.
struct TwoAgents {
  using Time = Clock::time_point;
  LocalStore store;
  LocalStore::Handle kv0 = store.Connect(), kv1 = store.Connect(), kvc = store.Connect();
  RendezvousSettings rdzv;
  std::optional<AgentMachine> a0, a1;
  std::optional<CoordinatorMachine> coordinator;
  Time now = Time(std::chrono::hours(1));

  explicit TwoAgents(int max_restarts) {
    rdzv.run_id = "t";
    rdzv.min_nodes = rdzv.max_nodes = 2;
    AgentSettings s;
    s.rdzv = rdzv;
    s.max_restarts = max_restarts;
    s.self = Member("0");
    s.hosts_store = true;
    a0.emplace(s);
    s.self = Member("1");
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

TEST_CASE("machines: a failure restarts both nodes with the same restart count") {
  TwoAgents t(1);
  auto [s0, s1] = t.Until();
  REQUIRE(s0.kind == ActionKind::kStartWorkers);
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  CHECK(s0.round.node_rank + s1.round.node_rank == 1);
  CHECK(s0.round.world_size == 4);
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause = WorkerCause(3);
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

TEST_CASE("machines: with no restarts left both agents exit with the root cause's code") {
  TwoAgents t(0);
  (void)t.Until();
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause = WorkerCause(7);
  t.a1->WorkersExited(failed, t.now);
  Action e1 = t.a1->Step(t.kv1, t.now);
  REQUIRE(e1.kind == ActionKind::kExit);
  CHECK(e1.exit_code == 7);
  CHECK(e1.failed);
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kStopWorkers);
  // Its own worker died of the broken connection: not the root cause.
  WorkersOutcome peer;
  peer.kind = WorkersOutcome::Kind::kFailed;
  peer.cause.cls = FailureClass::kPeer;
  peer.cause.exit_code = 141;
  t.a0->WorkersExited(peer, t.now);
  Action e0 = t.a0->Step(t.kv0, t.now);
  REQUIRE(e0.kind == ActionKind::kExit);
  CHECK(e0.exit_code == 7);
  CHECK(e0.message == e1.message);
}

TEST_CASE("machines: an agent signalled in a restart's rendezvous is not counted in the round") {
  TwoAgents t(2);
  (void)t.Until();
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause = WorkerCause(3);
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
  // Not a round of two with a departed node: the job ends, naming why.
  REQUIRE(a0.kind == ActionKind::kExit);
  CHECK(a0.exit_code == 1);
  CHECK(a0.message ==
        "the job failed: the agent on host-1 (1, joining round 1) was stopped by SIGTERM; 1 "
        "node(s) remain, fewer than the minimum of 2 (--nnodes)");
}

TEST_CASE("machines: a peer-class failure waits for the failure that caused it") {
  TwoAgents t(0);
  (void)t.Until();
  WorkersOutcome peer;
  peer.kind = WorkersOutcome::Kind::kFailed;
  peer.cause.cls = FailureClass::kPeer;
  peer.cause.exit_code = 141;
  t.a0->WorkersExited(peer, t.now);
  CHECK(t.a0->Step(t.kv0, t.now).kind == ActionKind::kWait);  // settling
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause = WorkerCause(4);
  t.a1->WorkersExited(failed, t.now + std::chrono::milliseconds(500));
  CHECK(t.a1->Step(t.kv1, t.now + std::chrono::milliseconds(500)).exit_code == 4);
  Action e0 = t.a0->Step(t.kv0, t.now + std::chrono::milliseconds(600));
  REQUIRE(e0.kind == ActionKind::kExit);
  CHECK(e0.exit_code == 4);
}

TEST_CASE("machines: a static node rank claimed twice fails the job at once, naming both") {
  LocalStore store;
  auto kv0 = store.Connect(), kv1 = store.Connect(), kv2 = store.Connect(), kvc = store.Connect();
  RendezvousSettings rdzv;
  rdzv.run_id = "t";
  rdzv.min_nodes = rdzv.max_nodes = 2;
  AgentSettings s;
  s.rdzv = rdzv;
  s.exclusive_rank = true;
  s.self = Member("0");
  s.self.requested_rank = 0;
  s.hosts_store = true;
  AgentMachine a0(s);
  s.hosts_store = false;
  s.self = Member("1");
  s.self.name = "host-b";
  s.self.requested_rank = 1;
  AgentMachine a1(s);
  s.self = Member("2");
  s.self.name = "host-c";
  s.self.requested_rank = 1;  // the mistake: a second agent given --node_rank=1
  AgentMachine a2(s);
  CoordinatorMachine coordinator(rdzv, "0", [](const std::string&) {});
  auto now = Clock::time_point(std::chrono::hours(1));
  (void)coordinator.Step(kvc, now);
  CHECK(a0.Step(kv0, now).kind == ActionKind::kWait);
  CHECK(a1.Step(kv1, now).kind == ActionKind::kWait);
  Action refused = a2.Step(kv2, now);
  REQUIRE(refused.kind == ActionKind::kExit);
  CHECK(refused.exit_code != 0);
  CHECK(refused.message.find("node rank 1 was claimed twice") != std::string::npos);
  CHECK(refused.message.find("host-b") != std::string::npos);
  CHECK(refused.message.find("host-c") != std::string::npos);
  // The others learn it from the record at their next step, not at the join timeout.
  now += std::chrono::milliseconds(200);
  for (auto [m, kv] : {std::pair{&a0, &kv0}, std::pair{&a1, &kv1}}) {
    Action a = m->Step(*kv, now);
    REQUIRE(a.kind == ActionKind::kExit);
    CHECK(a.message == refused.message);
  }
}

TEST_CASE("machines: an agent whose --nnodes or --max_restarts differ from the job's is refused") {
  LocalStore store;
  auto kv0 = store.Connect(), kv1 = store.Connect(), kv2 = store.Connect();
  AgentSettings s;
  s.rdzv.run_id = "t";
  s.rdzv.min_nodes = 1;
  s.rdzv.max_nodes = 3;
  s.max_restarts = 2;
  s.self = Member("0");
  AgentMachine first(s);
  s.self = Member("1");
  AgentMachine same(s);
  s.self = Member("2");
  s.max_restarts = 0;
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
}

TEST_CASE("machines: an agent's own claim is no conflict when it joins again") {
  LocalStore store;
  auto kv = store.Connect();
  AgentSettings s;
  s.rdzv.run_id = "t";
  s.rdzv.min_nodes = s.rdzv.max_nodes = 2;
  s.exclusive_rank = true;
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
  CHECK(end.message ==
        "the job succeeded while this agent waited to join round 1: no worker ran "
        "here");
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
  CHECK(failed_at >= 14900);  // the 15 s left
  CHECK(failed_at <= 15200);
}

}  // namespace
}  // namespace ddprun::rendezvous
