// NameLaggards over several process groups: numbers are compared within a
// group only, a rank blocked in one group is not blamed for falling behind in
// another, and ranks that wait for each other are a deadlock.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "supervisor/torch_progress.hpp"

namespace ddprun::supervisor {
namespace {

bool Has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Rank `rank`'s last collective in process group `group` (members "": the
// default group, every rank).
TorchProgress In(int rank, const std::string& group, std::vector<int> members, long seq,
                 bool entered) {
  TorchProgress p;
  p.rank = rank;
  p.seq = seq;
  p.op = "gloo:all_reduce";
  p.entered = entered;
  p.group = group;
  p.everyone = group == "0";
  p.desc = p.everyone ? "default_pg" : "undefined";
  p.members = std::move(members);
  return p;
}

TEST_CASE("ReadTorchProgress reads one line per process group, the newest last") {
  const auto dir = std::filesystem::temp_directory_path() / "ddprun_torch_verdict_read";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "progress_0") << "20 gloo:all_reduce retired 0 * default_pg\n"
                                       "7 gloo:broadcast entered 1 0,1 tensor parallel\n";
  std::ofstream(dir / "progress_1") << "19 gloo:all_reduce retired 0 *\n";
  const auto p = ReadTorchProgress(dir.string(), {0, 1});
  REQUIRE(p.size() == 3);
  CHECK((p[0].group == "0" && p[0].everyone && p[0].seq == 20 && !p[0].entered));
  CHECK((p[1].group == "1" && !p[1].everyone && p[1].members == std::vector<int>{0, 1}));
  CHECK((p[1].desc == "tensor parallel" && p[1].op == "gloo:broadcast" && p[1].entered));
  CHECK((p[2].rank == 1 && p[2].seq == 19 && p[2].desc.empty()));
  // A damaged line: ranks that are no numbers (or too long for one) are left out, never thrown.
  std::ofstream(dir / "progress_2") << "3 gloo:all_reduce entered 4 0,99999999999,x\xff,2 d\n";
  const auto damaged = ReadTorchProgress(dir.string(), {2});
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].members == std::vector<int>{0, 2});
  std::filesystem::remove_all(dir);
}

TEST_CASE("A rank blocked in a subgroup is not blamed for falling behind in the default group") {
  // Ranks 0,1 all_reduce in group 1 after each step; rank 1 stopped before it.
  // Rank 2 went on to the next step's all_reduce of the default group.
  const std::vector<TorchProgress> progress = {
      In(0, "0", {}, 20, false), In(0, "1", {0, 1}, 7, true),   // waits for rank 1
      In(1, "1", {0, 1}, 6, false), In(1, "0", {}, 20, false),  // stopped: the cause
      In(2, "0", {}, 21, true)};                                // waits for ranks 0,1
  const TorchSide side = NameLaggards(progress);
  CHECK(side.laggards == std::vector<int>{1});
  CHECK_FALSE(side.none_recorded);
  CHECK(side.verdict ==
        "rank 1 did not enter gloo:all_reduce #21 (rank 2 waits in it), nor gloo:all_reduce #7 "
        "of process group 1 (ranks 0,1) (rank 0 waits in it)");
  CHECK(Has(side.text, "rank 0 waits in gloo:all_reduce #7 of process group 1 (ranks 0,1)"));
  CHECK(Has(side.text,
            "rank 0 did not enter gloo:all_reduce #21: its last is gloo:all_reduce "
            "#20 (finished)"));
}

TEST_CASE("Ranks with no collective recorded: the verdict says so, and the side is marked") {
  // The agent reads the mark, not the text, to tell a hook that could not write its files.
  TorchProgress none;
  none.rank = 0;
  const TorchSide side = NameLaggards({none});
  CHECK(side.none_recorded);
  CHECK(side.verdict == "no rank recorded a collective yet: the hang is before the first one");
}

TEST_CASE("Numbers of different groups are never compared") {
  // Group 1's numbers run behind the default group's; everyone is level in each.
  const TorchSide side = NameLaggards({In(0, "0", {}, 40, false), In(0, "1", {0, 1}, 9, true),
                                       In(1, "0", {}, 40, false), In(1, "1", {0, 1}, 9, true)});
  CHECK(side.laggards.empty());
  CHECK(side.verdict ==
        "every local rank waits in gloo:all_reduce #9 of process group 1 (ranks 0,1): the "
        "collective itself is stuck, or a rank on another node never entered it");
  CHECK(side.all_waiting);
}

TEST_CASE("Ranks that finished their last collective are not all waiting") {
  // A node whose one rank stalled between collectives: the hang is its own, not another node's.
  const TorchSide side = NameLaggards({In(1, "0", {}, 200, false)});
  CHECK(side.laggards.empty());
  CHECK(side.verdict ==
        "rank 1 finished gloo:all_reduce #200: the hang is outside PyTorch's collectives");
  CHECK_FALSE(side.all_waiting);
}

TEST_CASE("A member that never entered its group's collective is behind in it") {
  const TorchSide side = NameLaggards(
      {In(0, "0", {}, 5, false), In(0, "3", {0, 1}, 1, true), In(1, "0", {}, 5, false)});
  CHECK(side.laggards == std::vector<int>{1});
  CHECK(Has(side.verdict, "rank 1 did not enter gloo:all_reduce #1 of process group 3"));
  CHECK(Has(side.text,
            "rank 1 did not enter gloo:all_reduce #1 of process group 3 (ranks 0,1): "
            "none of this group's yet"));
}

TEST_CASE("Ranks waiting for each other in different groups are a deadlock, none blamed") {
  const TorchSide side = NameLaggards({In(0, "1", {0, 1}, 4, false), In(0, "2", {0, 1}, 5, true),
                                       In(1, "2", {0, 1}, 4, false), In(1, "1", {0, 1}, 5, true)});
  CHECK(side.laggards.empty());
  CHECK(side.deadlocked == std::vector<int>{0, 1});  // the root cause is among them
  CHECK(side.verdict ==
        "ranks 0,1 wait for each other: rank 0 waits in gloo:all_reduce #5 of process group 2 "
        "(ranks 0,1) for rank 1; rank 1 waits in gloo:all_reduce #5 of process group 1 (ranks "
        "0,1) for rank 0: a deadlock, the ranks call the collectives of their process groups in "
        "different orders");
}

TEST_CASE("A rank that only waits for a deadlocked one is not among the deadlocked") {
  // Found by an attacking helper: the root cause was rank 2, which waited (in group 3) for rank
  // 0, one of the two ranks that wait for each other.
  const TorchSide side = NameLaggards({In(0, "1", {0, 1}, 4, false), In(0, "2", {0, 1}, 5, true),
                                       In(1, "2", {0, 1}, 4, false), In(1, "1", {0, 1}, 5, true),
                                       In(2, "3", {0, 2}, 1, true)});
  CHECK(side.laggards.empty());
  CHECK(side.deadlocked == std::vector<int>{0, 1});
  CHECK(Has(side.verdict, "a deadlock"));
}

// Rank `rank` waits in a p2p operation ("send" or "recv") with `peer` in the default group.
TorchProgress P2p(int rank, const std::string& op, int peer) {
  TorchProgress p = In(rank, "0", {}, -1, true);
  p.p2p = true;
  p.op = op;
  p.peer = peer;
  return p;
}

TEST_CASE("ReadTorchProgress reads the p2p operations a rank waits in") {
  const auto dir = std::filesystem::temp_directory_path() / "ddprun_torch_verdict_p2p";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "progress_0") << "1 gloo:all_reduce retired 0 * default_pg\n"
                                       "p2p send 1 0 * default_pg\n"
                                       "p2p recv * 3 0,1 pipeline\n"
                                       "p2p xfer 1 0 * default_pg\n"  // no such operation
                                       "p2p send 99999999999 0 *\n";  // no rank
  const auto p = ReadTorchProgress(dir.string(), {0});
  REQUIRE(p.size() == 4);
  CHECK((!p[0].p2p && p[0].seq == 1));
  CHECK((p[1].p2p && p[1].op == "send" && p[1].peer == 1 && p[1].everyone && p[1].entered));
  CHECK((p[2].op == "recv" && p[2].peer == TorchProgress::kAnyPeer && p[2].group == "3"));
  CHECK((p[2].members == std::vector<int>{0, 1} && p[2].desc == "pipeline"));
  CHECK((p[3].peer == TorchProgress::kUnknownPeer && p[3].seq == -1));
  std::filesystem::remove_all(dir);
}

TEST_CASE("A rank blocked in a send is not blamed; the rank that never posted the recv is") {
  // Rank 0 sends to rank 1, which stopped instead of receiving; rank 2 went on to #2.
  const TorchSide side = NameLaggards({In(0, "0", {}, 1, false), P2p(0, "send", 1),
                                       In(1, "0", {}, 1, false), In(2, "0", {}, 2, true)});
  CHECK(side.laggards == std::vector<int>{1});
  CHECK(side.verdict ==
        "rank 1 did not enter gloo:all_reduce #2 (rank 2 waits in it), nor post the recv for "
        "rank 0's send to rank 1 (rank 0 waits in it)");
  CHECK(Has(side.text,
            "rank 0 waits in send to rank 1 (point to point, which Gloo's flight "
            "recorder leaves out)"));
  // Nobody behind in a collective: the p2p operation alone names the cause.
  const TorchSide alone =
      NameLaggards({In(0, "0", {}, 1, false), P2p(0, "recv", 1), In(1, "0", {}, 1, false)});
  CHECK(alone.laggards == std::vector<int>{1});
  CHECK(alone.verdict ==
        "rank 1 did not post the send for rank 0's recv from rank 1 (rank 0 waits in it)");
}

TEST_CASE("A send waiting for a rank inside a collective the sender never entered: a deadlock") {
  const TorchSide side =
      NameLaggards({In(0, "0", {}, 1, false), P2p(0, "send", 1), In(1, "0", {}, 2, true)});
  CHECK(side.laggards.empty());
  CHECK(side.deadlocked == std::vector<int>{0, 1});
  CHECK(side.verdict ==
        "ranks 0,1 wait for each other: rank 0 waits in send to rank 1; rank 1 waits in "
        "gloo:all_reduce #2 for rank 0: a deadlock, the ranks call the collectives and "
        "point-to-point operations of their process groups in different orders");
}

TEST_CASE("A transfer both sides posted, or one with a rank elsewhere, blames no local rank") {
  const TorchSide both =
      NameLaggards({In(0, "0", {}, 1, false), P2p(0, "send", 1), In(1, "0", {}, 1, false),
                    P2p(1, "recv", TorchProgress::kAnyPeer)});
  CHECK(both.laggards.empty());
  CHECK(both.verdict.rfind("rank 0 waits in send to rank 1; rank 1 waits in recv from any "
                           "rank: the transfers themselves are stuck, or their peers on another "
                           "node never posted theirs; ",
                           0) == 0);
  // Rank 5 is on another node.
  const TorchSide elsewhere =
      NameLaggards({In(0, "0", {}, 1, false), P2p(0, "send", 5), In(1, "0", {}, 1, false)});
  CHECK(elsewhere.laggards.empty());
  CHECK(Has(elsewhere.verdict, "rank 0 waits in send to rank 5: the transfers themselves"));
  // Only p2p recorded, no collective yet.
  const TorchSide first = NameLaggards({P2p(0, "send", 1), In(1, "0", {}, -1, false)});
  CHECK(first.laggards == std::vector<int>{1});
}

TEST_CASE(
    "A monitored_barrier that raised on a rank takes its group's barriers out of the verdict") {
  // Rank 0's probe barrier over ranks 0,1 raised (rank 1 never came) and was
  // caught; later rank 0 stopped outside any collective and rank 1 waits in
  // all_reduce #11. The barrier's counts (1 against none) are no cause.
  TorchProgress barrier = In(0, "1:monitored_barrier", {0, 1}, 1, false);
  barrier.op = "monitored_barrier";
  barrier.raised = true;
  const std::vector<TorchProgress> progress = {barrier, In(0, "0", {}, 10, false),
                                               In(1, "0", {}, 11, true)};
  const TorchSide side = NameLaggards(progress);
  CHECK(side.laggards == std::vector<int>{0});
  CHECK(side.verdict == "rank 0 did not enter gloo:all_reduce #11 (rank 1 waits in it)");
  CHECK(Has(side.text,
            "monitored_barrier of process group 1:monitored_barrier (ranks 0,1) raised "
            "on rank 0: its calls are not compared"));
  CHECK_FALSE(Has(side.text, "did not enter monitored_barrier"));
  // Later both call the group's barrier again, rank 0 its 2nd, rank 1 its 1st:
  // the same barrier, one apart for good. Rank 1 waiting in it is no lag of rank 0's.
  TorchProgress again = barrier;
  again.seq = 2;
  again.entered = true;
  TorchProgress first = barrier;
  first.rank = 1;
  first.raised = false;
  first.entered = true;
  const TorchSide later =
      NameLaggards({In(0, "0", {}, 11, false), again, In(1, "0", {}, 11, false), first});
  CHECK(later.laggards.empty());
  CHECK_FALSE(Has(later.verdict, "did not enter"));
  // The state is read from the hook's line.
  const auto dir = std::filesystem::temp_directory_path() / "ddprun_torch_verdict_raised";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "progress_0") << "1 monitored_barrier raised 1:monitored_barrier 0,1 u\n";
  const auto read = ReadTorchProgress(dir.string(), {0});
  REQUIRE(read.size() == 1);
  CHECK((read[0].raised && !read[0].entered && read[0].seq == 1));
  std::filesystem::remove_all(dir);
}

TEST_CASE("A group's label names its description and shortens a long member list") {
  std::vector<int> many;
  for (int r = 0; r < 12; ++r) many.push_back(r);
  TorchProgress a = In(0, "5", many, 3, true);
  a.desc = "tp";
  TorchProgress b = a;
  b.rank = 1;
  b.seq = 2;
  b.entered = false;
  const TorchSide side = NameLaggards({a, b});
  CHECK(side.verdict ==
        "rank 1 did not enter gloo:all_reduce #3 of process group 5 'tp' (ranks 0,1,2,3,4,5,6,7,"
        "... 12 in all) (rank 0 waits in it)");
}

}  // namespace
}  // namespace ddprun::supervisor
