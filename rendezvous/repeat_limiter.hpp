// Says a message that repeats at most once per period: the first at once,
// the repeats within the period counted and said as one line when it ends.
// The store's closes of a flood of clients for one reason were a line each
// (1907 identical lines in seconds; attack 93), burying the ones that matter.
//
// Not thread-safe: the store uses it on its loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::rendezvous {

class RepeatLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // `kinds`: how many different messages are counted at once; past it a new
  // one is always said (each message is still bounded by the flood's rate).
  explicit RepeatLimiter(Clock::duration period, size_t kinds = 256)
      : period_(period), kinds_(kinds) {}

  // Whether `text` is to be said now; if not, it is counted.
  bool Take(const std::string& text, Clock::time_point now) {
    auto it = seen_.find(text);
    if (it != seen_.end() && now - it->second.since < period_) {
      ++it->second.more;
      return false;
    }
    if (it != seen_.end()) {
      if (it->second.more > 0) return true;  // Due() says the count, this one is said too
      it->second.since = now;
      return true;
    }
    if (seen_.size() < kinds_) seen_.emplace(text, Seen{now, 0});
    return true;
  }

  // The repeats counted in periods that ended by `now`: (text, how many),
  // each said once, then forgotten.
  std::vector<std::pair<std::string, uint64_t>> Due(Clock::time_point now) {
    std::vector<std::pair<std::string, uint64_t>> due;
    for (auto it = seen_.begin(); it != seen_.end();) {
      if (now - it->second.since < period_) {
        ++it;
        continue;
      }
      if (it->second.more > 0) due.emplace_back(it->first, it->second.more);
      it = seen_.erase(it);
    }
    return due;
  }

  // When Due() next has something to say: none while nothing is counted.
  std::optional<Clock::time_point> NextDue() const {
    std::optional<Clock::time_point> next;
    for (const auto& [text, seen] : seen_) {
      if (seen.more > 0 && (!next || seen.since + period_ < *next)) next = seen.since + period_;
    }
    return next;
  }

  Clock::duration period() const { return period_; }

 private:
  struct Seen {
    Clock::time_point since;  // when it was last said
    uint64_t more = 0;        // repeats since, not said
  };
  Clock::duration period_;
  size_t kinds_;
  std::map<std::string, Seen> seen_;
};

}  // namespace ddprun::rendezvous
