// Splits a byte stream into whole lines, keeping an incomplete tail until the
// rest arrives, so that teed output is never cut or interleaved mid-line.
//
// Not thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace ddprun::supervisor {

class LineSplitter {
 public:
  // A line, ending in '\n'; or a piece of one longer than max_line, which
  // does not (the next piece goes on with it).
  using LineFn = std::function<void(std::string_view line)>;

  explicit LineSplitter(size_t max_line = 1 << 20) : max_line_(max_line) {}

  // Calls `emit` for every line completed by `data`. A line longer than
  // max_line is emitted in pieces of max_line bytes as it comes, only the
  // last one ended with its '\n': nothing is added to what the worker wrote.
  void Feed(std::string_view data, const LineFn& emit);
  // Emits what is left (a last line without newline) with a '\n' added.
  void Finish(const LineFn& emit);
  // The incomplete line kept so far.
  std::string_view pending() const { return partial_; }

 private:
  size_t max_line_;
  std::string partial_;
};

}  // namespace ddprun::supervisor
