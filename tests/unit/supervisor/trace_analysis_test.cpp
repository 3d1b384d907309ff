#include "supervisor/trace_analysis.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace ddprun::supervisor {
namespace {

using env::OpState;
using env::TraceEntry;
using Clock = std::chrono::system_clock;

constexpr int64_t kSec = 1000000000;
// Every op of these tests happens around t = 1000 s; "now" is 1030 s.
const Clock::time_point kNow = Clock::time_point(std::chrono::seconds(1030));

TraceEntry Op(uint64_t seq, OpState state, const char* op = "allreduce",
              uint64_t bytes = 25 << 20) {
  TraceEntry e;
  e.seq = seq;
  std::strncpy(e.op, op, sizeof(e.op) - 1);
  e.bytes = bytes;
  e.state = static_cast<uint32_t>(state);
  e.enqueued_ns = 1000 * kSec;
  if (state != OpState::kEnqueued) e.started_ns = 1010 * kSec;
  if (state == OpState::kCompleted || state == OpState::kFailed) e.completed_ns = 1020 * kSec;
  return e;
}

// Ranks that completed ops 1041..last_done, then (when `in` is set) are in `in`.
std::vector<TraceEntry> Ran(uint64_t last_done, std::optional<uint64_t> in = std::nullopt) {
  std::vector<TraceEntry> v;
  for (uint64_t s = 1041; s <= last_done; ++s) v.push_back(Op(s, OpState::kCompleted));
  if (in) v.push_back(Op(*in, OpState::kStarted));
  return v;
}

bool Has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST_CASE("the rank that has not entered the collective the others wait in is the straggler") {
  std::map<int, std::vector<TraceEntry>> traces = {
      {0, Ran(1042, 1043)}, {1, Ran(1042)}, {2, Ran(1042, 1043)}, {3, Ran(1042, 1043)}};
  TraceAnalysis a = AnalyzeTraces(traces, {}, kNow);
  CHECK(a.verdict == TraceVerdict::kStragglers);
  REQUIRE(a.waited_in);
  CHECK(a.waited_in->seq == 1043);
  CHECK(a.waiting == std::vector<int>{0, 2, 3});
  CHECK(a.stragglers == std::vector<int>{1});
  REQUIRE(!a.verdict_lines.empty());
  CHECK(a.verdict_lines[0] ==
        "ranks 0,2,3 wait in allreduce #1043 (25.0 MiB); rank 1 completed #1042 and has not "
        "entered #1043");
  REQUIRE(a.ranks.size() == 4);
  CHECK(a.ranks[0].last_completed->seq == 1042);
  CHECK(a.ranks[0].current->seq == 1043);
  CHECK(a.ranks[0].current->state == OpState::kStarted);
  CHECK_FALSE(a.ranks[1].current);
  CHECK(Has(a.text,
            "rank 0: completed allreduce #1042 (25.0 MiB); in allreduce #1043 (25.0 "
            "MiB), started 20.0 s ago"));
  CHECK(Has(a.text, "rank 1: completed allreduce #1042 (25.0 MiB); not in a collective"));
}

TEST_CASE("a rank still in an older collective is named with that collective") {
  std::map<int, std::vector<TraceEntry>> traces = {{0, Ran(1042, 1043)}, {1, Ran(1041, 1042)}};
  TraceAnalysis a = AnalyzeTraces(traces, {}, kNow);
  CHECK(a.stragglers == std::vector<int>{1});
  CHECK(a.verdict_lines[0] ==
        "rank 0 waits in allreduce #1043 (25.0 MiB); rank 1 is still in allreduce #1042 (25.0 "
        "MiB), started 20.0 s ago, and has not entered #1043");
}

TEST_CASE("the op a rank waits in is its oldest unfinished one, not its newest enqueued") {
  // NCCL-like: rank 0 launched 1043..1045; 1043 cannot finish without rank 1.
  auto r0 = Ran(1042, 1043);
  r0.push_back(Op(1044, OpState::kStarted));
  r0.push_back(Op(1045, OpState::kEnqueued));
  TraceAnalysis a = AnalyzeTraces({{0, r0}, {1, Ran(1042)}}, {}, kNow);
  CHECK(a.waited_in->seq == 1043);
  CHECK(a.stragglers == std::vector<int>{1});
}

TEST_CASE("no rank inside a collective means the hang is outside communication") {
  TraceAnalysis a = AnalyzeTraces({{0, Ran(1042)}, {1, Ran(1042)}}, {}, kNow);
  CHECK(a.verdict == TraceVerdict::kIdle);
  CHECK(a.verdict_lines ==
        std::vector<std::string>{
            "no rank is inside a collective: the hang is outside communication"});
}

TEST_CASE("every visible rank inside the same collective has no straggler") {
  TraceAnalysis a = AnalyzeTraces({{0, Ran(1042, 1043)}, {1, Ran(1042, 1043)}}, {}, kNow);
  CHECK(a.verdict == TraceVerdict::kAllInside);
  CHECK(a.stragglers.empty());
  CHECK(Has(a.verdict_lines[0], "ranks 0,1 wait in allreduce #1043 (25.0 MiB)"));
  CHECK(Has(a.verdict_lines[0], "every visible rank has entered it"));
}

TEST_CASE("ranks without a flight recorder are listed and left out of the verdict") {
  TraceAnalysis a =
      AnalyzeTraces({{0, Ran(1042, 1043)}, {1, Ran(1042)}},
                    {{5, kNoFlightRecorder}, {3, "flight recorder x: truncated"}}, kNow);
  CHECK(a.stragglers == std::vector<int>{1});
  CHECK(Has(a.text, "rank 5: no flight recorder (not a ddprun DDP worker, or not started)\n"));
  CHECK(Has(a.text, "rank 3: flight recorder x: truncated\n"));
  // Rows in rank order, the unreadable ones merged in.
  CHECK(a.text.find("rank 1:") < a.text.find("rank 3:"));
  CHECK(a.text.find("rank 3:") < a.text.find("rank 5:"));
  CHECK(a.verdict_lines.back() == "not analysed (no flight recorder): ranks 3,5");
}

TEST_CASE("no readable recorder at all gives the no-traces verdict") {
  TraceAnalysis a = AnalyzeTraces({}, {{0, kNoFlightRecorder}}, kNow);
  CHECK(a.verdict == TraceVerdict::kNoTraces);
  CHECK(a.verdict_lines[0] == "no flight recorder could be read: nothing to compare");
}

TEST_CASE("a rank with an empty recorder is a straggler that recorded nothing") {
  TraceAnalysis a =
      AnalyzeTraces({{0, {Op(0, OpState::kStarted, "broadcast", 100)}}, {1, {}}}, {}, kNow);
  CHECK(a.stragglers == std::vector<int>{1});
  CHECK(a.verdict_lines[0] ==
        "rank 0 waits in broadcast #0 (100 B); rank 1 has recorded no collective and has not "
        "entered #0");
  CHECK(Has(a.text, "rank 1: no collective recorded yet"));
}

TEST_CASE("a failed collective is reported with its rank") {
  auto r1 = Ran(1042);
  r1.push_back(Op(1043, OpState::kFailed));
  TraceAnalysis a = AnalyzeTraces({{0, Ran(1042, 1043)}, {1, r1}}, {}, kNow);
  CHECK(a.failed == std::vector<int>{1});
  CHECK(a.verdict == TraceVerdict::kAllInside);  // rank 1 entered #1043 (and failed it)
  CHECK(Has(a.text, "rank 1 failed allreduce #1043 (25.0 MiB) 10.0 s ago"));
}

TEST_CASE("NeverEntered names the ranks that never came to the collective others timed out in") {
  auto timed_out = Ran(1042);
  timed_out.push_back(Op(1043, OpState::kFailed));
  CHECK(NeverEntered({{0, timed_out}, {1, Ran(1042)}, {2, timed_out}}) ==
        "rank 1 never entered allreduce #1043 (25.0 MiB), in which ranks 0,2 waited until it "
        "failed");
  CHECK(NeverEntered({{0, timed_out}, {1, Ran(1042, 1043)}}).empty());  // it came: no laggard
  CHECK(NeverEntered({{0, Ran(1042, 1043)}, {1, Ran(1042)}}).empty());  // nothing failed yet
}

TEST_CASE("different collectives at the same seq are reported as a mismatch") {
  auto r0 = Ran(1042);
  r0.push_back(Op(1043, OpState::kStarted, "allreduce"));
  auto r2 = Ran(1042);
  r2.push_back(Op(1043, OpState::kStarted, "broadcast"));
  TraceAnalysis a = AnalyzeTraces({{0, r0}, {2, r2}}, {}, kNow);
  REQUIRE(a.mismatches.size() == 1);
  CHECK(a.mismatches[0].rank == 2);
  CHECK(a.mismatches[0].other_rank == 0);
  CHECK(Has(a.text,
            "rank 2 is in broadcast #1043 while rank 0 is in allreduce #1043: the ranks issue "
            "different collectives"));
}

TEST_CASE("ranks in different collectives at the top seq: the verdict is the divergence") {
  // Rank 2 ran one step fewer: its last loss all-reduce meets the others' broadcast.
  auto Last = [](const char* op, uint64_t bytes) {
    auto v = Ran(1042);
    v.push_back(Op(1043, OpState::kStarted, op, bytes));
    return v;
  };
  TraceAnalysis a = AnalyzeTraces(
      {{0, Last("broadcast", 128)}, {1, Last("broadcast", 128)}, {2, Last("allreduce", 4)}}, {},
      kNow);
  CHECK(a.verdict == TraceVerdict::kMismatch);
  CHECK(a.stragglers == std::vector<int>{2});  // the odd one out, not a rank in the majority
  REQUIRE(!a.verdict_lines.empty());
  CHECK(a.verdict_lines[0] ==
        "the ranks called different collectives at #1043: rank 2 in allreduce #1043 (4 B); ranks "
        "0,1 in broadcast #1043 (128 B); their programs diverged (options, step counts or data "
        "that differ between ranks, or a collective under a rank-dependent condition): rank 2 "
        "the odd one out");
  // Two ranks, one each: nobody to single out.
  TraceAnalysis tie =
      AnalyzeTraces({{0, Last("broadcast", 128)}, {1, Last("allreduce", 4)}}, {}, kNow);
  CHECK(tie.verdict == TraceVerdict::kMismatch);
  CHECK(tie.stragglers.empty());
  CHECK(tie.verdict_lines[0].find("the odd one out") == std::string::npos);
  CHECK(FirstMismatch({{0, Last("broadcast", 128)}, {1, Last("allreduce", 4)}}) ==
        "rank 1 is in allreduce #1043 while rank 0 is in broadcast #1043: the ranks issue "
        "different collectives");
  CHECK(FirstMismatch({{0, Ran(1042)}, {1, Ran(1042)}}).empty());
  // The broadcast's receiver got through it into #1044; its root is still in #1043, as is the
  // odd rank: the divergence at #1043 is the verdict, not the receiver waiting in #1044.
  auto through = Ran(1042);
  through.push_back(Op(1043, OpState::kCompleted, "broadcast", 128));
  through.push_back(Op(1044, OpState::kStarted));
  TraceAnalysis three = AnalyzeTraces(
      {{0, Last("broadcast", 128)}, {1, through}, {2, Last("allreduce", 4)}}, {}, kNow);
  CHECK(three.verdict == TraceVerdict::kMismatch);
  CHECK(three.stragglers == std::vector<int>{2});
  CHECK(three.verdict_lines[0].rfind("the ranks called different collectives at #1043: ", 0) == 0);
}

TEST_CASE("a dump on request speaks of no hang") {
  TraceAnalysis inside = AnalyzeTraces({{0, Ran(1042, 1043)}, {1, Ran(1042, 1043)}}, {}, kNow,
                                       /*hung=*/false);
  CHECK(inside.verdict_lines[0] ==
        "ranks 0,1 wait in allreduce #1043 (25.0 MiB) 20.0 s ago: every "
        "visible rank has entered it");
  TraceAnalysis ahead =
      AnalyzeTraces({{0, Ran(1042, 1043)}, {1, Ran(1042)}}, {}, kNow, /*hung=*/false);
  CHECK(ahead.verdict_lines[0] ==
        "as each recorder was read (one after another, while they ran): rank 0 waits in "
        "allreduce #1043 (25.0 MiB); rank 1 completed #1042");
  TraceAnalysis idle = AnalyzeTraces({{0, Ran(1042)}}, {}, kNow, /*hung=*/false);
  CHECK(idle.verdict_lines[0] == "no rank is inside a collective");
}

TEST_CASE("different sizes at the same seq are reported as a mismatch") {
  TraceAnalysis a = AnalyzeTraces({{0, {Op(7, OpState::kCompleted, "allreduce", 4096)}},
                                   {1, {Op(7, OpState::kCompleted, "allreduce", 1024)}}},
                                  {}, kNow);
  REQUIRE(a.mismatches.size() == 1);
  CHECK(Has(a.text,
            "rank 1 ran allreduce #7 with 1.0 KiB while rank 0 ran it with 4.0 KiB: the ranks "
            "pass different sizes"));
}

TEST_CASE("FormatBytes picks the largest binary unit below the value") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1536) == "1.5 KiB");
  CHECK(FormatBytes(25ull << 20) == "25.0 MiB");
  CHECK(FormatBytes(3ull << 30) == "3.0 GiB");
}

TEST_CASE("FormatTraceEntry shows seq, op, size, dtype, state and age") {
  std::string line = FormatTraceEntry(Op(12, OpState::kCompleted, "allreduce", 2048), kNow);
  CHECK(Has(line, "#12 "));
  CHECK(Has(line, "allreduce"));
  CHECK(Has(line, "2.0 KiB"));
  CHECK(Has(line, "float32"));
  CHECK(Has(line, "completed 10.0 s ago (took 10.0 s)"));
  CHECK(Has(FormatTraceEntry(Op(13, OpState::kEnqueued), kNow), "enqueued 30.0 s ago"));
}

}  // namespace
}  // namespace ddprun::supervisor
