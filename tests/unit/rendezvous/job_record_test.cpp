// The job record's transitions, its encoding, and compare-and-set (the
// machines that act on it: machines_test.cpp).
#include "rendezvous/job_record.hpp"

#include <doctest/doctest.h>

#include "tests/unit/rendezvous/record_test_util.hpp"

namespace ddprun::rendezvous {
namespace {

using record_test::Closed;
using record_test::Member;
using record_test::WorkerCause;

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
  // So with a crash at exit: its program had finished too.
  c = WorkerCause(134);
  c.cls = FailureClass::kExitCrash;
  auto crashed = EndRoundByFailure(rec, 0, c, 3);
  REQUIRE(crashed.ok());
  CHECK(crashed->final());
  CHECK(crashed->exit_code() == 134);
  auto crashed_back = JobRecord::Decode(crashed->Encode());
  REQUIRE(crashed_back.ok());
  CHECK(crashed_back->final_cause.cls == FailureClass::kExitCrash);
  CHECK(std::string(FailureClassName(FailureClass::kExitCrash)) == "exit-crash");
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
        "of 2 (--nnodes), and no restart is left (--max_restarts=0) to wait for another node: "
        "start the job again with every node, or give --nnodes a lower minimum so that it goes "
        "on without one");
  // With a restart left, the round gathers on (join_timeout bounds it); none is used.
  auto waits = Withdraw(*left, 1, "1", "the agent on host-1 was stopped by SIGTERM", 2, {}, 2);
  REQUIRE(waits.ok());
  CHECK_FALSE(waits->final());
  CHECK(waits->restarts == left->restarts);
  // A new node that joined round 1 counts: the two can form it (rounds end for new nodes so).
  auto with_newcomer = Withdraw(*left, 1, "1", "the agent on host-1 was stopped by SIGTERM", 2,
                                {"0", "1", "2", "7"});
  REQUIRE(with_newcomer.ok());
  CHECK_FALSE(with_newcomer->final());
  // So does one waiting while a round runs, when a member of it is lost.
  JobRecord running = Closed(2);
  CHECK(EndRoundByMembership(running, 0, "lost host-1", "1", 2)->final());
  CHECK_FALSE(EndRoundByMembership(running, 0, "lost host-1", "1", 2, {"7"})->final());
  // Too few with a restart left: the round ends as by a failure, one restart used, and the
  // next round waits for another node (torchrun's agents restart when a node is lost).
  auto restart = EndRoundByMembership(running, 0, "lost host-1", "1", 2, {}, 1);
  REQUIRE(restart.ok());
  CHECK_FALSE(restart->final());
  CHECK(restart->end == RoundEnd::kFailure);
  CHECK(restart->restarts == 1);
  CHECK(restart->lost_agent == "1");
  CHECK(restart->cause.what ==
        "lost host-1; 1 node(s) remain, fewer than the minimum of 2 (--nnodes): the job restarts "
        "(as for a failure) and waits up to join_timeout for another node to join");
  // The last restart used: the next such loss fails the job.
  JobRecord used = running;
  used.restarts = 1;
  CHECK(EndRoundByMembership(used, 0, "lost host-1", "1", 2, {}, 1)->final());
  // An agent that was in no round before only withdraws: others may still come.
  auto first = Withdraw(JobRecord(), 0, "5", "x", 2);
  REQUIRE(first.ok());
  CHECK_FALSE(first->final());
}

TEST_CASE("a record of another ddprun version is named as such, not as malformed") {
  std::string text = Closed(2).Encode();
  const std::string magic = "ddprun-job/3";
  REQUIRE(text.find(magic) != std::string::npos);
  text.replace(text.find(magic), magic.size(), "ddprun-job/1");
  auto rec = JobRecord::Decode(text);
  REQUIRE_FALSE(rec.ok());
  CHECK(rec.status().message() ==
        "rendezvous: the job record is ddprun-job/1, this ddprun reads ddprun-job/3: run the "
        "same ddprun version on every node");
}

TEST_CASE("a loss past the last restart names the failure that used it") {
  // Round 0's worker failure uses the one restart; round 1 loses a member
  // before its workers ran: the job fails of the loss, and the message still
  // names the failure the user has to look at.
  auto failed = EndRoundByFailure(Closed(2), 0, WorkerCause(3), 1);
  REQUIRE(failed.ok());
  CHECK(failed->restart_cause == WorkerCause(3).Describe());
  auto round1 = CloseRound(*failed, 1, failed->members);
  REQUIRE(round1.ok());
  auto decoded = JobRecord::Decode(round1->Encode());
  REQUIRE(decoded.ok());
  CHECK(decoded->restart_cause == WorkerCause(3).Describe());
  auto lost = EndRoundByMembership(*decoded, 1, "lost host-1", "1", 2, {}, 1);
  REQUIRE(lost.ok());
  REQUIRE(lost->final());
  CHECK(lost->final_cause.what ==
        "lost host-1; 1 node(s) remain, fewer than the minimum of 2 (--nnodes), and no restart is "
        "left (--max_restarts=1) to wait for another node: start the job again with every node, "
        "or give --nnodes a lower minimum so that it goes on without one (the last restart was "
        "used after " +
            WorkerCause(3).Describe() + ")");
  // A loss that used the restart is named the same way by the next one.
  auto by_loss = EndRoundByMembership(Closed(2), 0, "lost host-1", "1", 2, {}, 1);
  REQUIRE(by_loss.ok());
  CHECK(by_loss->restart_cause == "lost host-1");
  // Without restarts nothing was used: no such note.
  auto none = EndRoundByMembership(Closed(2), 0, "lost host-1", "1", 2, {}, 0);
  REQUIRE(none.ok());
  CHECK(none->final_cause.what.find("the last restart") == std::string::npos);
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

TEST_CASE("every member but the one lost a moment before succeeding is the job's success") {
  // The simulation (attack 110): the loss was recorded just before the others' workers said
  // they had succeeded, and the job ran again, training twice.
  JobRecord two = Closed(2);
  auto lost = EndRoundByMembership(two, 0, "lost host-1", "1", 1);
  REQUIRE(lost.ok());
  auto done = MarkDone(*lost, 0, 0);
  REQUIRE(done.ok());
  CHECK(done->outcome == JobOutcome::kSucceeded);
  CHECK(done->gone == std::vector<bool>{false, true});
  CHECK(done->gone_reason == "lost host-1");
  // Too few left (MIN 3 of 3): a restart was used; the others' successes still end the job.
  JobRecord three = Closed(3);
  auto restarted = EndRoundByMembership(three, 0, "lost host-2", "2", 3, {}, 1);
  REQUIRE(restarted.ok());
  REQUIRE(restarted->end == RoundEnd::kFailure);
  auto one = MarkDone(*restarted, 0, 1);
  REQUIRE(one.ok());
  CHECK_FALSE(one->final());  // member 0's may still have failed: the restart stands
  auto both = MarkDone(*one, 0, 0);
  REQUIRE(both.ok());
  CHECK(both->outcome == JobOutcome::kSucceeded);
  // A worker's failure is no loss: a success after it is not taken.
  auto failed = EndRoundByFailure(three, 0, WorkerCause(3), 1);
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

}  // namespace
}  // namespace ddprun::rendezvous
