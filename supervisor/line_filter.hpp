// The duplicate filters (--duplicate_stdout_filters and _stderr_): copies a
// worker's lines that contain one of the texts, whole and prefixed, to the
// filtered file, as torchrun does. Lines come from a LineSplitter, so a long
// one comes in pieces: a text that spans two pieces still matches, and the
// line is copied from its beginning. A line is held until it matches or ends,
// up to `hold_limit` bytes; of a longer one, a match copies from the last
// piece held on, saying how many bytes before it were not kept.
//
// Not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddprun::supervisor {

class LineFilter {
 public:
  LineFilter(std::vector<std::string> needles, std::string prefix,
             size_t hold_limit = size_t{64} << 20);

  // Takes a line, or a piece of one (not ending in '\n'; the next piece goes
  // on with it); appends to `out` what the filtered file gets.
  void Take(std::string_view piece, std::string& out);

 private:
  bool Matches(size_t from) const;
  void EndLine();

  static constexpr size_t kKeptCapacity = size_t{64} << 10;

  std::vector<std::string> needles_;
  std::string prefix_;
  size_t hold_limit_;
  size_t longest_ = 0;  // the longest needle's size
  // The current line's bytes so far, not yet copied (or, once it matched,
  // nothing: the rest is copied as it comes).
  std::string held_;
  size_t dropped_ = 0;    // bytes of the current line let go: over hold_limit
  bool matched_ = false;  // the current line matched: its rest is copied
};

}  // namespace ddprun::supervisor
