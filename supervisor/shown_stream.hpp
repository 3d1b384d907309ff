// How one worker stream appears on a console it shares with the other workers.
//
// Whole lines go out as they complete, so that workers writing at once never
// split each other's lines. A line still incomplete after a short wait (a
// prompt, a progress bar redrawn with '\r') is shown as far as it has come,
// and its rest follows it; another worker's line meanwhile starts on a line
// of its own. A prefix ("[default0]:") goes before each line and again after
// each carriage return, so that a progress bar redrawn in place keeps it.
//
// Not thread-safe: the streams of one console share a ConsoleTurn.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddprun::supervisor {

class ShownStream;

// Which stream, if any, left a line unfinished on one console; and how often
// the launcher's own lines (from any thread) ended such a line there
// (ConsoleWriter::own_line_breaks), so that the stream's rest starts a line.
struct ConsoleTurn {
  ShownStream* mid_line = nullptr;
  const std::atomic<uint64_t>* launcher_breaks = nullptr;
  uint64_t breaks_seen = 0;
};

class ShownStream {
 public:
  ShownStream(std::string prefix, ConsoleTurn* turn) : prefix_(std::move(prefix)), turn_(turn) {}
  ~ShownStream();
  ShownStream(const ShownStream&) = delete;
  ShownStream& operator=(const ShownStream&) = delete;

  // Appends to `out` what the console shows for a whole line (ending in '\n'),
  // or a piece of an overlong one, of this stream, less what of it was shown
  // already.
  void Line(std::string_view line, std::string& out);
  // Appends to `out` what is new in this stream's incomplete line `pending`.
  void Partial(std::string_view pending, std::string& out);
  // Lines shown from now on get `prefix` instead.
  void SetPrefix(std::string prefix) { prefix_ = std::move(prefix); }
  // Whether `pending`, the incomplete line, has bytes not shown yet.
  bool Unshown(std::string_view pending) const { return pending.size() > shown_; }

 private:
  // kBroken: another stream ended this one's unfinished line on the console,
  // so the line's own '\n', if it comes next, is not shown again.
  enum class At { kLineStart, kAfterReturn, kInLine, kBroken };
  void Show(std::string_view text, std::string& out);
  void Render(std::string_view text, std::string& out);

  std::string prefix_;
  ConsoleTurn* turn_;
  At at_ = At::kLineStart;
  size_t shown_ = 0;  // bytes of the incomplete line already shown
};

}  // namespace ddprun::supervisor
