#include "supervisor/hang_check.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace ddprun::supervisor {

namespace {

double Seconds(SteadyTime::duration d) { return std::chrono::duration<double>(d).count(); }

double LimitOf(const Beat& b, const HangLimits& limits) {
  if (b.finishing) return limits.exit_timeout.count();
  return b.beaten ? limits.hang_timeout.count() : limits.startup_timeout.count();
}

const char* WhyFormat(const Beat& b) {
  if (b.finishing) {
    return "hung at exit: removed its heartbeat file %.1f s ago and has not exited "
           "(--exit_timeout=%g)";
  }
  return b.beaten ? "hung: no heartbeat for %.1f s (--hang_timeout=%g)"
                  : "hung: no first heartbeat %.1f s after start (--startup_timeout=%g)";
}

// Its silence is its own: it could have beat (a finishing one is awaited regardless).
bool Silenced(const Beat& b) { return b.finishing || b.cannot_beat.empty(); }

}  // namespace

HangVerdict FindHung(const std::vector<Beat>& beats, const HangLimits& limits, SteadyTime now) {
  HangVerdict v;
  bool any = false;  // some worker is past its limit
  for (const Beat& b : beats) {
    const double limit = LimitOf(b, limits);
    any = any || (b.running && Silenced(b) && limit > 0 && Seconds(now - b.last) >= limit);
  }
  for (size_t i = 0; i < beats.size(); ++i) {
    const Beat& b = beats[i];
    if (!b.running) continue;
    const double silent = Seconds(now - b.last);
    const HangReport::Worker w{i,      b.rank,   b.local_rank, b.pid,
                               silent, b.beaten, b.finishing,  Seconds(now - b.seen)};
    v.report.running.push_back(w);
    const double limit = LimitOf(b, limits);
    const double slack = any ? std::min(0.5, 0.1 * limit) : 0.0;
    if (limit <= 0 || silent < limit - slack || !Silenced(b)) {
      // A finishing worker makes no progress to speak of: it is awaited.
      if (b.beaten && !b.finishing) v.report.beating_ranks.push_back(b.rank);
      continue;
    }
    v.report.hung.push_back(w);
    char why[200];
    std::snprintf(why, sizeof(why), WhyFormat(b), silent, limit);
    std::string text = why;
    if (limit - silent >= 0.05) {  // within the slack: hung along with one past its limit
      std::snprintf(why, sizeof(why), ", within %.1f s of the limit another worker passed",
                    limit - silent);
      text.insert(text.rfind(" ("), why);
    }
    v.hung.push_back({i, text, b.finishing});
  }
  return v;
}

std::optional<SteadyTime> NextHangCheck(const std::vector<Beat>& beats, const HangLimits& limits,
                                        SteadyTime now) {
  const auto hang = std::chrono::duration_cast<SteadyTime::duration>(limits.hang_timeout);
  const auto startup = std::chrono::duration_cast<SteadyTime::duration>(limits.startup_timeout);
  const auto exit_limit = std::chrono::duration_cast<SteadyTime::duration>(limits.exit_timeout);
  std::optional<SteadyTime> next;
  auto earliest = [&next](std::optional<SteadyTime> due) {
    if (due && (!next || *due < *next)) next = due;
  };
  for (const Beat& b : beats) {
    if (!b.running) continue;
    if (b.finishing) {
      if (exit_limit.count() > 0) earliest(b.last + exit_limit);
      // It may create its heartbeat file again (a new process group after a
      // destroyed one): looked at within a hang limit, its hang is found on time.
      if (hang.count() > 0) earliest(now + hang);
      continue;
    }
    if (b.beaten && hang.count() > 0) earliest(b.last + hang);
    if (!b.beaten && startup.count() > 0) earliest(b.last + startup);
    // Not beaten yet and no startup limit: look again later for its first beat.
    if (!b.beaten && startup.count() == 0 && hang.count() > 0) earliest(now + hang);
    // It may remove its heartbeat file at any moment: its exit limit counts from when that is seen.
    if (exit_limit.count() > 0) earliest(now + exit_limit / 4);
  }
  return next;
}

}  // namespace ddprun::supervisor
