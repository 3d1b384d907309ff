// An agent that finds the rendezvous store gone: while a step waited, while its
// workers ran (their grace, and what decides its exit) or after they ended.
// The agents' other decisions: machines_test.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "rendezvous/agent_machine.hpp"
#include "tests/unit/rendezvous/record_test_util.hpp"
#include "tests/unit/rendezvous/two_agents.hpp"

namespace ddprun::rendezvous {
namespace {

using record_test::Member;
using test::TwoAgents;

// One agent of two, waiting for the other, whose store goes down after `gap`
// (`waited` of it spent waiting for the store's replies) since its first step.
struct LoneAgent {
  LocalStore store;
  LocalStore::Handle kv = store.Connect();
  AgentMachine m{Settings()};
  Clock::time_point now = Clock::time_point(std::chrono::hours(1));
  static AgentSettings Settings() {
    AgentSettings s;
    s.rdzv.run_id = "t";
    s.rdzv.min_nodes = s.rdzv.max_nodes = 2;
    s.self = Member("0");
    return s;
  }
  Action GoneAfter(std::chrono::milliseconds gap, std::chrono::milliseconds waited) {
    REQUIRE(m.Step(kv, now).kind == ActionKind::kWait);
    store.SetDown(true);
    m.WaitedForStore(waited);
    Action gone = m.Step(kv, now + gap);
    REQUIRE(gone.kind == ActionKind::kExit);
    return gone;
  }
};

TEST_CASE("machines: a store gone at the end of a long step is told as a pause inside it") {
  using std::chrono::milliseconds;
  // SIGSTOP while a request waits: the clock the step began with cannot show it; the driver
  // measures the step (StepTook), and the agent says it may have been dropped.
  LoneAgent a;
  Action gone = a.GoneAfter(milliseconds(200), milliseconds(0));
  CHECK(gone.message.find("may have been dropped") == std::string::npos);
  CHECK(a.m.StepTook(milliseconds(100), milliseconds(0), gone).message ==
        gone.message);  // a quick step
  Action paused = a.m.StepTook(milliseconds(5100), milliseconds(50), gone);
  CHECK(paused.exit_code == 1);
  CHECK(paused.message == gone.message +
                              "; this agent did not run for 5.05 s (stopped or starved) and may "
                              "have been dropped from the job, which then ended: its outcome is "
                              "in the other agents' logs");
  // The request waited for a store host that was stopped, then killed: this agent ran all
  // along (found by an attacking helper: it said it had not run).
  LoneAgent b;
  gone = b.GoneAfter(milliseconds(200), milliseconds(0));
  Action silent = b.m.StepTook(milliseconds(5100), milliseconds(5090), gone);
  CHECK(silent.message == gone.message +
                              "; it had not answered this agent's request for 5.1 s (its host "
                              "stopped or starved) before it went");
}

TEST_CASE("machines: a gap between steps spent waiting for the store is not this agent's absence") {
  using std::chrono::milliseconds;
  // The wait for the next record version, and its cancel, blocked on a stopped store host
  // that was then killed: the next step found it gone 6.2 s after the last.
  LoneAgent waiting;
  Action gone = waiting.GoneAfter(milliseconds(6200), milliseconds(6150));
  CHECK(gone.message.find("did not run") == std::string::npos);
  CHECK(gone.message.find("may have been dropped") == std::string::npos);
  // Stopped itself for most of the gap (its waits saw the pause and did not count it).
  LoneAgent stopped;
  gone = stopped.GoneAfter(milliseconds(6200), milliseconds(300));
  CHECK(gone.message.find("; this agent did not run for 5.9 s (stopped or starved)") !=
        std::string::npos);
}

TEST_CASE("machines: a store gone while the workers ran: their own exit decides the agent's") {
  // Found by an attacking helper: an agent stopped (SIGSTOP) past the job's end came back to
  // workers that had all exited 0 and a store that was gone, and exited 1; its peer and torchrun
  // exit 0. The workers may end by themselves within the grace (the chaos suite's host killed as
  // the job ended: one agent stopped its workers at once and exited 1, the other's had exited 0),
  // else they are stopped; then what they did decides.
  for (auto kind : {WorkersOutcome::Kind::kSucceeded, WorkersOutcome::Kind::kStopped}) {
    CAPTURE(static_cast<int>(kind));
    TwoAgents t(0);
    auto [s0, s1] = t.Until();
    REQUIRE(s1.kind == ActionKind::kStartWorkers);
    t.store.SetDown(true);
    t.now += std::chrono::seconds(10);
    Action note = t.a1->Step(t.kv1, t.now);
    REQUIRE(note.kind == ActionKind::kWait);
    CHECK(t.a1->phase() == AgentMachine::Phase::kStoreGone);
    CHECK(note.message.find("this node's workers may go on for up to 5 s to end by themselves") !=
          std::string::npos);
    const std::string gone = note.message.substr(0, note.message.find("; this node's"));
    CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);  // the grace starts
    CHECK(t.a1->next_wake() <= t.now + std::chrono::seconds(5));
    if (kind == WorkersOutcome::Kind::kStopped) {
      t.now += std::chrono::milliseconds(4900);
      CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);
      t.now += std::chrono::milliseconds(100);
      Action stop = t.a1->Step(t.kv1, t.now);
      REQUIRE(stop.kind == ActionKind::kStopWorkers);
      CHECK(stop.message == gone + "; this node's workers did not end within 5 s after it");
      CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);  // until the workers are out
    } else {
      t.now += std::chrono::seconds(1);  // they end by themselves
    }
    WorkersOutcome outcome;
    outcome.kind = kind;
    t.a1->WorkersExited(outcome, t.now);
    Action exit = t.a1->Step(t.kv1, t.now);
    REQUIRE(exit.kind == ActionKind::kExit);
    CHECK(exit.message.rfind(gone, 0) == 0);
    if (kind == WorkersOutcome::Kind::kSucceeded) {
      CHECK(exit.exit_code == 0);
      CHECK(exit.message.find("this node's workers had all exited 0 by then") != std::string::npos);
    } else {
      CHECK(exit.exit_code == 1);
      CHECK(exit.message == gone);
    }
  }
}

TEST_CASE(
    "machines: back after the keep-alive limit to a store gone: said so; the workers decide") {
  // Attack 95: a static job's agent stopped past the keep-alive limit while its workers ran; the
  // host took its node for lost and failed the job (exit 1), and this agent, back to a store
  // gone, exited 0 once its workers did. Stopping them then (tried) killed healthy workers of a
  // job the host had completed without the node (attack 100): nothing here tells which it was,
  // so the workers keep their grace and decide, and the message says the node was taken for
  // lost. A scheduler that fails a job for any node's failure then has the host's verdict.
  TwoAgents t(0);
  auto [s0, s1] = t.Until();
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  t.store.SetDown(true);
  t.now += std::chrono::seconds(16);  // past 5 s x 3
  Action note = t.a1->Step(t.kv1, t.now);
  REQUIRE(note.kind == ActionKind::kWait);
  CHECK(note.message.find("; this agent did not run for 16 s (stopped or starved), past the "
                          "keep-alive limit (15 s): the other agents will have taken this node "
                          "for lost, and the job went on or ended without it: its outcome is in "
                          "the other agents' logs; this node's workers may go on for up to 5 s") !=
        std::string::npos);
  WorkersOutcome outcome;
  outcome.kind = WorkersOutcome::Kind::kSucceeded;
  t.a1->WorkersExited(outcome, t.now + std::chrono::seconds(1));
  Action exit = t.a1->Step(t.kv1, t.now + std::chrono::seconds(1));
  REQUIRE(exit.kind == ActionKind::kExit);
  CHECK(exit.exit_code == 0);
  CHECK(exit.message.find("past the keep-alive limit") != std::string::npos);
  CHECK(exit.message.find("this node's workers had all exited 0 by then") != std::string::npos);
}

TEST_CASE("machines: a pause before this round is not told when the store goes in it") {
  // Attack 100: stopped 3 s in round 0 (lost, rejoined), the agent said "did not run for 3.1 s"
  // when the store host died in round 1.
  TwoAgents t(1);
  auto [s0, s1] = t.Until();
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  t.now += std::chrono::seconds(8);  // agent 1 did not run for 8 s in round 0 ...
  (void)t.a1->Step(t.kv1, t.now);
  // ... then a failure used the restart: both run again in round 1.
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause = record_test::WorkerCause(3);
  t.a1->WorkersExited(failed, t.now);
  (void)t.a1->Step(t.kv1, t.now);
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kStopWorkers);
  WorkersOutcome stopped;
  stopped.kind = WorkersOutcome::Kind::kStopped;
  t.a0->WorkersExited(stopped, t.now);
  auto [r0, r1] = t.Until();
  REQUIRE(r1.kind == ActionKind::kStartWorkers);
  REQUIRE(r1.round.restart_count == 1);
  t.store.SetDown(true);
  t.now += std::chrono::milliseconds(100);
  Action note = t.a1->Step(t.kv1, t.now);
  CHECK(note.message.find("did not run") == std::string::npos);
}

TEST_CASE("machines: the grace after the store went counts from when it was found gone") {
  // Found by an attacking helper: the store host SIGSTOPped, the request that found it gone took
  // read_timeout (5 s), and the grace was counted from that request's start: the workers were
  // stopped in the same millisecond as "may go on for up to 5 s" was said.
  TwoAgents t(0);
  auto [s0, s1] = t.Until();
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  t.store.SetDown(true);
  REQUIRE(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);  // the step whose request failed
  CHECK(t.a1->next_wake() <= t.now);                            // stepped again at once
  t.now += std::chrono::seconds(5);  // the failed request's wait, as the driver's clock saw it
  CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);  // the grace starts here
  t.now += std::chrono::milliseconds(4900);
  CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);
  t.now += std::chrono::milliseconds(100);
  CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kStopWorkers);
}

// Node 1's agent, its workers exited with `outcome`, finds the store down at its next step.
Action ExitWithTheStoreDown(TwoAgents& t, const WorkersOutcome& outcome) {
  auto [s0, s1] = t.Until();
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  t.a1->WorkersExited(outcome, t.now);
  t.store.SetDown(true);
  Action exit = t.a1->Step(t.kv1, t.now);
  REQUIRE(exit.kind == ActionKind::kExit);
  return exit;
}

WorkersOutcome Failed() {
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause.exit_code = 3;
  return failed;
}

TEST_CASE("machines: a store gone after this node's workers all exited 0: the agent exits 0") {
  // Its workers' success was being recorded, or was, and the job's end not yet read: as torchrun's
  // agent, and as an agent whose workers were still running at the time (above).
  TwoAgents t(0);
  Action exit = ExitWithTheStoreDown(t, WorkersOutcome{});
  CHECK(exit.exit_code == 0);
  CHECK(exit.message.find("this node's workers had all exited 0 by then") != std::string::npos);
  // Failed workers: 1, as before.
  TwoAgents f(0);
  CHECK(ExitWithTheStoreDown(f, Failed()).exit_code == 1);
}

TEST_CASE("machines: a store that did not answer after the workers all exited 0: still exit 0") {
  // Attack 101: the store host stopped (SIGSTOP, a partition) as the job ended. The request that
  // recorded the workers' success waited read_timeout (past the keep-alive interval); the driver's
  // account of that long step (StepTook) decided again from the exit, and the agent exited 1 though
  // every worker had succeeded. The account amends what is said, not what was decided.
  using std::chrono::milliseconds;
  TwoAgents t(0);
  Action exit = ExitWithTheStoreDown(t, WorkersOutcome{});
  Action told = t.a1->StepTook(milliseconds(6000), milliseconds(6000), exit);
  CHECK(told.kind == ActionKind::kExit);
  CHECK(told.exit_code == 0);
  CHECK(told.message.find("it had not answered this agent's request for 6 s") != std::string::npos);
  CHECK(told.message.find("this node's workers had all exited 0 by then") != std::string::npos);
  // Its workers failed: the same account, the same exit 1.
  TwoAgents f(0);
  Action exit1 = ExitWithTheStoreDown(f, Failed());
  CHECK(f.a1->StepTook(milliseconds(6000), milliseconds(6000), exit1).exit_code == 1);
}

TEST_CASE("machines: an exit decided steps after the store went is not decided again") {
  // The workers ran when the store went; they all exited 0 later, and the step that read that
  // was long (this agent starved): its exit 0 stands, told as it was.
  using std::chrono::milliseconds;
  TwoAgents t(0);
  auto [s0, s1] = t.Until();
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  t.store.SetDown(true);
  REQUIRE(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);
  t.now += milliseconds(300);
  t.a1->WorkersExited(WorkersOutcome{}, t.now);
  Action exit = t.a1->Step(t.kv1, t.now);
  REQUIRE(exit.kind == ActionKind::kExit);
  REQUIRE(exit.exit_code == 0);
  Action told = t.a1->StepTook(milliseconds(6000), milliseconds(0), exit);
  CHECK(told.exit_code == 0);
  CHECK(told.message == exit.message);
}

TEST_CASE(
    "machines: workers failing by themselves after the store went: its loss stays the cause") {
  // The chaos suite's host killed mid-training: the other nodes' workers fail of the peers gone
  // with it, each node's first its own; every agent names the store's loss, then theirs.
  TwoAgents t(0);
  auto [s0, s1] = t.Until();
  REQUIRE(s1.kind == ActionKind::kStartWorkers);
  t.store.SetDown(true);
  Action note = t.a1->Step(t.kv1, t.now);
  REQUIRE(note.kind == ActionKind::kWait);
  const std::string gone = note.message.substr(0, note.message.find("; this node's"));
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause.exit_code = 1;
  failed.cause.what = "rank 2 (local_rank 0, pid 7) exit code 1";
  t.now += std::chrono::milliseconds(300);
  t.a1->WorkersExited(failed, t.now);
  Action exit = t.a1->Step(t.kv1, t.now);
  REQUIRE(exit.kind == ActionKind::kExit);
  CHECK(exit.exit_code == 1);
  CHECK(exit.message ==
        gone + "; this node's workers failed meanwhile (rank 2 (local_rank 0, pid 7) exit code 1)");
}

TEST_CASE("machines: the store host stopped by a signal: the others exit 1, not 128+N") {
  // Found by an attacking helper: the others exited 143 (SIGTERM to the host), which tells a
  // scheduler they were stopped themselves; torchrun's exit 1, as for a store gone.
  TwoAgents t(0);
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kWait);
  REQUIRE(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);
  t.a0->Interrupted(15, "SIGTERM");
  t.now += std::chrono::milliseconds(50);
  Action host = t.a0->Step(t.kv0, t.now);
  REQUIRE(host.kind == ActionKind::kExit);
  CHECK(host.exit_code == 128 + 15);
  t.now += std::chrono::milliseconds(50);
  Action other = t.a1->Step(t.kv1, t.now);
  REQUIRE(other.kind == ActionKind::kExit);
  CHECK(other.exit_code == 1);
  CHECK(other.message ==
        "the job failed: the agent hosting the store (host-0) was stopped by SIGTERM");
}

TEST_CASE("machines: a job's end read while the workers stopped outlasts a store gone later") {
  // Attack 82: node 1, stopped past the keep-alive limit, came back to the record of its own
  // loss (the job failed), sat out its workers' long grace, found the store gone, and printed
  // its own worker as the root cause, "store gone".
  TwoAgents t(0);
  (void)t.Until();
  t.now += std::chrono::seconds(1);
  WorkersOutcome failed;
  failed.kind = WorkersOutcome::Kind::kFailed;
  failed.cause = record_test::WorkerCause(3);
  t.a0->WorkersExited(failed, t.now);
  REQUIRE(t.a0->Step(t.kv0, t.now).kind == ActionKind::kExit);  // the job failed: 3
  failed.cause = record_test::WorkerCause(7);
  t.a1->FailedEarly(failed, t.now);  // its own failure, as its other workers begin their grace
  CHECK(t.a1->Step(t.kv1, t.now).kind == ActionKind::kWait);
  t.store.SetDown(true);  // the host left before the grace ended
  t.now += std::chrono::seconds(10);
  t.a1->WorkersExited(failed, t.now);
  Action exit = t.a1->Step(t.kv1, t.now);
  REQUIRE(exit.kind == ActionKind::kExit);
  CHECK(exit.exit_code == 3);
  CHECK(exit.failed);
  CHECK(exit.root_cause.exit_code == 3);
  CHECK(exit.message.find("store") == std::string::npos);
}

}  // namespace
}  // namespace ddprun::rendezvous
