// Cross-rank analysis of flight recorders (docs/flight-recorder.md): which
// collective every rank completed last, which one it is in, and which ranks
// keep the others waiting. The supervisor's answer to PyTorch's fr_trace
// "Not all ranks joining collective" (shared/reference/ddp.md §2.6), on the
// ranks one agent can see.
//
// The match key is `seq`: the same collective has the same seq on every rank.
// A rank is "in" the oldest of its ops that is enqueued or started (ops
// complete in order, so that is the one it waits for). The verdict is about
// the highest seq some rank is in: the ranks in it wait; the ranks that have
// not reached it are the stragglers.
//
// Pure functions of their arguments; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/format.hpp"
#include "env/trace_file.hpp"

namespace ddprun::supervisor {

// One collective as the analysis names it.
struct OpRef {
  uint64_t seq = 0;
  std::string op;  // "allreduce"
  uint64_t bytes = 0;
  env::OpState state = env::OpState::kEnqueued;
  std::chrono::system_clock::time_point since;  // started (or enqueued, or finished)
};

struct RankTraceStatus {
  int rank = 0;
  std::optional<OpRef> last_completed;  // the highest completed seq
  std::optional<OpRef> current;         // the op it waits in: oldest enqueued/started
  std::optional<OpRef> failed;          // the highest failed seq, if any
  bool empty = false;                   // a recorder with no entry yet
};

// Two ranks that ran different collectives, or sizes, at the same seq.
struct OpMismatch {
  uint64_t seq = 0;
  int rank = 0;        // the odd one
  OpRef op;            // what `rank` has
  int other_rank = 0;  // the reference (the lowest rank with that seq)
  OpRef other_op;
};

enum class TraceVerdict {
  kNoTraces,    // no rank's recorder could be read
  kIdle,        // no rank is inside a collective
  kStragglers,  // some ranks wait in `seq`, others have not entered it
  kAllInside,   // every visible rank has entered `seq`: the hang is elsewhere
  kMismatch,    // the ranks in `seq` are in different collectives (or sizes): they diverged
};

struct TraceAnalysis {
  std::vector<RankTraceStatus> ranks;   // visible ranks, by rank
  std::map<int, std::string> no_trace;  // rank -> why it has no analysis
  TraceVerdict verdict = TraceVerdict::kNoTraces;
  std::optional<OpRef> waited_in;          // kStragglers / kAllInside: the collective
  std::vector<int> waiting;                // ranks inside waited_in->seq
  std::vector<int> stragglers;             // ranks that have not entered it
  std::vector<int> failed;                 // ranks with a failed collective
  std::vector<OpMismatch> mismatches;      // lowest seq first
  std::vector<std::string> verdict_lines;  // the verdict, one finding per line
  std::string text;                        // per-rank table then the verdict
};

// What to say about a rank whose trace file does not exist.
inline constexpr char kNoFlightRecorder[] =
    "no flight recorder (not a ddprun DDP worker, or not started)";

// `traces`: rank -> its entries, oldest first (env::ReadTraceFile).
// `no_trace`: rank -> why there are none (kNoFlightRecorder, or the read
// error); those ranks are listed and left out of the verdict. `now` is the
// wall clock the "started N s ago" figures are measured against.
// `hung`: whether a rank was found hung; false for a dump on request, whose
// verdict speaks of no hang (and whose recorders, read one after another while
// the ranks run, may show one ahead of another by the collectives run meanwhile).
// kMismatch's stragglers are the ranks in the rarest collective at `seq`, none
// on a tie.
TraceAnalysis AnalyzeTraces(const std::map<int, std::vector<env::TraceEntry>>& traces,
                            const std::map<int, std::string>& no_trace,
                            std::chrono::system_clock::time_point now, bool hung = true);

// The first collective two ranks ran differently (another op, or another
// size, at the same seq), as a sentence: "rank 1 is in broadcast #64 while
// rank 0 is in allreduce #64: the ranks issue different collectives"; "" when
// none.
std::string FirstMismatch(const std::map<int, std::vector<env::TraceEntry>>& traces);

// After a collective failed (timed out) on some ranks: the ranks that never
// entered the highest failed one, e.g. "rank 1 never entered allreduce #9
// (548.0 KiB), in which ranks 0,2 waited until it failed"; "" when every rank
// with a recorder entered it.
std::string NeverEntered(const std::map<int, std::vector<env::TraceEntry>>& traces);

using ddprun::FormatBytes;  // base/format.hpp

// "#1043 allreduce 25.0 MiB float32 started 12.3 s ago" style, one line, for
// the per-rank dump (time since the op's latest timestamp).
std::string FormatTraceEntry(const env::TraceEntry& e, std::chrono::system_clock::time_point now);

}  // namespace ddprun::supervisor
