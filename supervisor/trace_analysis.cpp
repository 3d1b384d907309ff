#include "supervisor/trace_analysis.hpp"

#include "base/format.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>

namespace ddprun::supervisor {
namespace {

using env::OpState;
using env::TraceEntry;
using Clock = std::chrono::system_clock;

constexpr size_t kMaxMismatchLines = 5;

Clock::time_point FromNs(int64_t ns) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

// The time the entry's state was reached.
int64_t LatestNs(const TraceEntry& e) {
  switch (static_cast<OpState>(e.state)) {
    case OpState::kCompleted:
    case OpState::kFailed:
      return e.completed_ns;
    case OpState::kStarted:
      return e.started_ns;
    case OpState::kEnqueued:
      break;
  }
  return e.enqueued_ns;
}

OpRef ToRef(const TraceEntry& e) {
  return OpRef{e.seq, std::string(e.op), e.bytes, static_cast<OpState>(e.state),
               FromNs(LatestNs(e))};
}

bool InFlight(uint32_t state) {
  return state == static_cast<uint32_t>(OpState::kEnqueued) ||
         state == static_cast<uint32_t>(OpState::kStarted);
}

// Entries come oldest first, so the last match is the highest seq.
RankTraceStatus StatusOf(int rank, const std::vector<TraceEntry>& entries) {
  RankTraceStatus s;
  s.rank = rank;
  s.empty = entries.empty();
  for (const TraceEntry& e : entries) {
    if (e.state == static_cast<uint32_t>(OpState::kCompleted)) s.last_completed = ToRef(e);
    if (e.state == static_cast<uint32_t>(OpState::kFailed)) s.failed = ToRef(e);
    if (InFlight(e.state) && !s.current) s.current = ToRef(e);
  }
  return s;
}

std::string Seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::string Ago(const OpRef& op, Clock::time_point now) {
  if (op.since.time_since_epoch().count() == 0) return "";
  return " " + Seconds(now - op.since) + " ago";
}

// "allreduce #1043 (25.0 MiB)"
std::string Name(const OpRef& op) {
  return op.op + " #" + std::to_string(op.seq) + " (" + FormatBytes(op.bytes) + ")";
}

// The highest seq reached by the rank, in any state; -1 when none.
int64_t Reached(const std::vector<TraceEntry>& entries) {
  return entries.empty() ? -1 : static_cast<int64_t>(entries.back().seq);
}

std::string RankLine(const RankTraceStatus& s, Clock::time_point now) {
  std::string line = "rank " + std::to_string(s.rank) + ": ";
  if (s.empty) return line + "no collective recorded yet";
  line += s.last_completed ? "completed " + Name(*s.last_completed) : "completed none";
  if (s.current) {
    line += "; in " + Name(*s.current) + ", " +
            env::OpStateName(static_cast<uint32_t>(s.current->state)) + Ago(*s.current, now);
  } else {
    line += "; not in a collective";
  }
  if (s.failed) line += "; failed " + Name(*s.failed) + Ago(*s.failed, now);
  return line;
}

// What a rank that has not entered `seq` is doing instead. Read while the
// ranks run (`hung` false), a rank a collective behind is no straggler yet.
std::string StragglerClause(const RankTraceStatus& s, uint64_t seq, Clock::time_point now,
                            bool hung) {
  const std::string who = "rank " + std::to_string(s.rank);
  const std::string tail = hung ? " and has not entered #" + std::to_string(seq) : "";
  if (s.current) {
    return who + " is still in " + Name(*s.current) + ", " +
           env::OpStateName(static_cast<uint32_t>(s.current->state)) + Ago(*s.current, now) +
           (hung ? "," + tail : "");
  }
  if (s.last_completed) return who + " completed #" + std::to_string(s.last_completed->seq) + tail;
  return who + " has recorded no collective" + tail;
}

std::string Doing(const OpRef& op) {
  return InFlight(static_cast<uint32_t>(op.state)) ? "is in" : "ran";
}

std::string MismatchLine(const OpMismatch& m) {
  const std::string seq = " #" + std::to_string(m.seq);
  const std::string a = "rank " + std::to_string(m.rank) + " " + Doing(m.op) + " ";
  const std::string b = "rank " + std::to_string(m.other_rank) + " " + Doing(m.other_op) + " ";
  if (m.op.op != m.other_op.op) {
    return a + m.op.op + seq + " while " + b + m.other_op.op + seq +
           ": the ranks issue different collectives";
  }
  return a + m.op.op + seq + " with " + FormatBytes(m.op.bytes) + " while " + b + "it with " +
         FormatBytes(m.other_op.bytes) + ": the ranks pass different sizes";
}

// Every seq two ranks both hold, compared against the lowest rank holding it.
std::vector<OpMismatch> FindMismatches(const std::map<int, std::vector<TraceEntry>>& traces) {
  std::map<uint64_t, std::pair<int, const TraceEntry*>> first;  // seq -> reference
  std::vector<OpMismatch> out;
  for (const auto& [rank, entries] : traces) {
    for (const TraceEntry& e : entries) {
      auto [it, inserted] = first.emplace(e.seq, std::make_pair(rank, &e));
      if (inserted) continue;
      const TraceEntry& ref = *it->second.second;
      if (std::string(e.op) == ref.op && e.bytes == ref.bytes) continue;
      out.push_back(OpMismatch{e.seq, rank, ToRef(e), it->second.first, ToRef(ref)});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const OpMismatch& a, const OpMismatch& b) { return a.seq < b.seq; });
  return out;
}

// The ranks that have `seq`, by the collective they ran there: (op, bytes) -> ranks.
std::map<std::pair<std::string, uint64_t>, std::vector<int>> GroupsAt(
    const std::map<int, std::vector<TraceEntry>>& traces, uint64_t seq) {
  std::map<std::pair<std::string, uint64_t>, std::vector<int>> groups;
  for (const auto& [rank, entries] : traces) {
    for (const TraceEntry& e : entries) {
      if (e.seq == seq) groups[{e.op, e.bytes}].push_back(rank);
    }
  }
  return groups;
}

// Fills verdict, waited_in, waiting and stragglers.
void Judge(const std::map<int, std::vector<TraceEntry>>& traces, TraceAnalysis& a) {
  std::optional<OpRef> top;  // the highest op some rank is in; lowest rank on ties
  for (const RankTraceStatus& s : a.ranks) {
    if (s.current && (!top || s.current->seq > top->seq)) top = s.current;
  }
  if (a.ranks.empty()) {
    a.verdict = TraceVerdict::kNoTraces;
    return;
  }
  if (!top) {
    a.verdict = TraceVerdict::kIdle;
    return;
  }
  a.waited_in = top;
  for (const RankTraceStatus& s : a.ranks) {
    const bool entered = Reached(traces.at(s.rank)) >= static_cast<int64_t>(top->seq);
    (entered ? a.waiting : a.stragglers).push_back(s.rank);
  }
  a.verdict = a.stragglers.empty() ? TraceVerdict::kAllInside : TraceVerdict::kStragglers;
  // Entered, but another collective: each waits for partners that never come
  // (a partner may have got through it, as a broadcast's receiver does). The
  // first such seq from the oldest one a rank is still in.
  uint64_t oldest = top->seq;
  for (const RankTraceStatus& s : a.ranks) {
    if (s.current) oldest = std::min(oldest, s.current->seq);
  }
  const auto parted = std::find_if(a.mismatches.begin(), a.mismatches.end(),
                                   [&](const OpMismatch& m) { return m.seq >= oldest; });
  if (parted == a.mismatches.end()) return;
  const auto groups = GroupsAt(traces, parted->seq);
  a.verdict = TraceVerdict::kMismatch;
  a.waited_in = parted->other_op;
  a.stragglers.clear();
  size_t fewest = SIZE_MAX, tied = 0;
  for (const auto& [op, ranks] : groups) {
    if (ranks.size() < fewest) {
      fewest = ranks.size();
      tied = 1;
      a.stragglers = ranks;
    } else if (ranks.size() == fewest) {
      ++tied;
    }
  }
  if (tied > 1) a.stragglers.clear();  // no odd one out: no rank to blame
}

// "rank 2 in allreduce #64 (4 B); ranks 0,1 in broadcast #64 (128 B)".
std::string DescribeGroups(const std::map<int, std::vector<TraceEntry>>& traces, uint64_t seq) {
  std::string out;
  for (const auto& [op, ranks] : GroupsAt(traces, seq)) {
    out += (out.empty() ? "" : "; ") + RanksNoun(ranks) + " in " + op.first + " #" +
           std::to_string(seq) + " (" + FormatBytes(op.second) + ")";
  }
  return out;
}

std::string WaitLine(const TraceAnalysis& a, const std::map<int, std::vector<TraceEntry>>& traces,
                     Clock::time_point now, bool hung) {
  const OpRef& op = *a.waited_in;
  if (a.verdict == TraceVerdict::kMismatch) {
    std::string line = "the ranks called different collectives at #" + std::to_string(op.seq) +
                       ": " + DescribeGroups(traces, op.seq) +
                       "; their programs diverged (options, step counts or data that differ "
                       "between ranks, or a collective under a rank-dependent condition)";
    if (!a.stragglers.empty()) line += ": " + RanksNoun(a.stragglers) + " the odd one out";
    return line;
  }
  const std::string verb = a.waiting.size() == 1 ? " waits in " : " wait in ";
  std::string line = RanksNoun(a.waiting) + verb + Name(op);
  if (a.verdict == TraceVerdict::kAllInside) {
    return line + Ago(op, now) +
           (hung ? ": every visible rank has entered it; the hang is inside the collective or on "
                   "a rank this agent cannot see"
                 : ": every visible rank has entered it");
  }
  if (!hung) line = "as each recorder was read (one after another, while they ran): " + line;
  for (const RankTraceStatus& s : a.ranks) {
    if (std::find(a.stragglers.begin(), a.stragglers.end(), s.rank) == a.stragglers.end()) continue;
    line += "; " + StragglerClause(s, op.seq, now, hung);
  }
  return line;
}

std::vector<std::string> VerdictLines(const TraceAnalysis& a,
                                      const std::map<int, std::vector<TraceEntry>>& traces,
                                      Clock::time_point now, bool hung) {
  std::vector<std::string> lines;
  if (a.verdict == TraceVerdict::kNoTraces) {
    lines.push_back("no flight recorder could be read: nothing to compare");
  } else if (a.verdict == TraceVerdict::kIdle) {
    lines.push_back(hung ? "no rank is inside a collective: the hang is outside communication"
                         : "no rank is inside a collective");
  } else {
    lines.push_back(WaitLine(a, traces, now, hung));
  }
  for (const RankTraceStatus& s : a.ranks) {
    if (s.failed) {
      lines.push_back("rank " + std::to_string(s.rank) + " failed " + Name(*s.failed) +
                      Ago(*s.failed, now));
    }
  }
  for (size_t i = 0; i < a.mismatches.size() && i < kMaxMismatchLines; ++i) {
    lines.push_back(MismatchLine(a.mismatches[i]));
  }
  if (a.mismatches.size() > kMaxMismatchLines) {
    lines.push_back("and " + std::to_string(a.mismatches.size() - kMaxMismatchLines) +
                    " more mismatches");
  }
  if (!a.no_trace.empty() && a.verdict != TraceVerdict::kNoTraces) {
    std::vector<int> unseen;
    for (const auto& [rank, why] : a.no_trace) unseen.push_back(rank);
    lines.push_back("not analysed (no flight recorder): " + RanksNoun(unseen));
  }
  return lines;
}

std::string Text(const TraceAnalysis& a, Clock::time_point now) {
  std::string text = "flight recorders:\n";
  auto seen = a.ranks.begin();
  auto unseen = a.no_trace.begin();
  // Both in rank order, merged.
  while (seen != a.ranks.end() || unseen != a.no_trace.end()) {
    if (unseen == a.no_trace.end() || (seen != a.ranks.end() && seen->rank < unseen->first)) {
      text += "  " + RankLine(*seen++, now) + "\n";
    } else {
      text += "  rank " + std::to_string(unseen->first) + ": " + unseen->second + "\n";
      ++unseen;
    }
  }
  text += "verdict:\n";
  for (const std::string& line : a.verdict_lines) text += "  " + line + "\n";
  return text;
}

}  // namespace

TraceAnalysis AnalyzeTraces(const std::map<int, std::vector<TraceEntry>>& traces,
                            const std::map<int, std::string>& no_trace, Clock::time_point now,
                            bool hung) {
  TraceAnalysis a;
  a.no_trace = no_trace;
  for (const auto& [rank, entries] : traces) {
    a.ranks.push_back(StatusOf(rank, entries));
    if (a.ranks.back().failed) a.failed.push_back(rank);
  }
  a.mismatches = FindMismatches(traces);
  Judge(traces, a);
  a.verdict_lines = VerdictLines(a, traces, now, hung);
  a.text = Text(a, now);
  return a;
}

std::string FirstMismatch(const std::map<int, std::vector<TraceEntry>>& traces) {
  const auto mismatches = FindMismatches(traces);
  return mismatches.empty() ? "" : MismatchLine(mismatches.front());
}

std::string NeverEntered(const std::map<int, std::vector<TraceEntry>>& traces) {
  std::optional<OpRef> failed;  // the highest failed op of any rank
  for (const auto& [rank, entries] : traces) {
    const RankTraceStatus s = StatusOf(rank, entries);
    if (s.failed && (!failed || s.failed->seq > failed->seq)) failed = s.failed;
  }
  if (!failed) return "";
  std::vector<int> entered, never;
  for (const auto& [rank, entries] : traces) {
    (Reached(entries) >= static_cast<int64_t>(failed->seq) ? entered : never).push_back(rank);
  }
  if (never.empty()) return "";
  return RanksNoun(never) + " never entered " + Name(*failed) + ", in which " + RanksNoun(entered) +
         " waited until it failed";
}

std::string FormatTraceEntry(const TraceEntry& e, Clock::time_point now) {
  char head[96];
  std::snprintf(head, sizeof(head), "#%-8" PRIu64 " %-15s %10s %-8s ", e.seq, e.op,
                FormatBytes(e.bytes).c_str(), env::TraceDTypeName(e.dtype).c_str());
  std::string line = std::string(head) + env::OpStateName(e.state);
  const int64_t ns = LatestNs(e);
  if (ns != 0) line += " " + Seconds(now - FromNs(ns)) + " ago";
  if (e.started_ns != 0 && e.completed_ns != 0) {
    line += " (took " + Seconds(std::chrono::nanoseconds(e.completed_ns - e.started_ns)) + ")";
  }
  return line;
}

}  // namespace ddprun::supervisor
