#include "supervisor/shown_stream.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "supervisor/line_splitter.hpp"

namespace ddprun::supervisor {
namespace {

// One worker stream as the supervisor feeds it: whole lines as they complete,
// and the incomplete line when it has waited (ShowPending).
struct Stream {
  Stream(std::string prefix, ConsoleTurn* turn, std::string* console)
      : shown(std::move(prefix), turn), console(console) {}
  void Feed(std::string_view data) {
    splitter.Feed(data, [this](std::string_view l) { shown.Line(l, *console); });
  }
  void ShowPending() { shown.Partial(splitter.pending(), *console); }
  void Finish() {
    splitter.Finish([this](std::string_view l) { shown.Line(l, *console); });
  }
  LineSplitter splitter;
  ShownStream shown;
  std::string* console;
};

TEST_CASE("whole lines are shown as they are, with the prefix before each") {
  ConsoleTurn turn;
  std::string console;
  Stream plain("", &turn, &console);
  plain.Feed("a\n\nb\n");
  CHECK(console == "a\n\nb\n");
  console.clear();
  Stream prefixed("[default0]:", &turn, &console);
  prefixed.Feed("a\n\nb\n");
  CHECK(console == "[default0]:a\n[default0]:\n[default0]:b\n");
}

TEST_CASE("an incomplete line is shown as far as it came, and its rest follows it") {
  ConsoleTurn turn;
  std::string console;
  Stream s("[r0]:", &turn, &console);
  s.Feed("Epoch 1: ");
  CHECK(console.empty());  // not before it has waited
  s.ShowPending();
  CHECK(console == "[r0]:Epoch 1: ");
  s.ShowPending();
  CHECK(console == "[r0]:Epoch 1: ");  // nothing new: nothing shown twice
  s.Feed("loss 0.5\n");
  CHECK(console == "[r0]:Epoch 1: loss 0.5\n");
  CHECK(turn.mid_line == nullptr);
}

TEST_CASE("a progress bar redrawn with a carriage return keeps its prefix") {
  ConsoleTurn turn;
  std::string console;
  Stream s("[r0]:", &turn, &console);
  s.Feed("\r 10%");
  s.ShowPending();
  s.Feed("\r 20%");
  s.ShowPending();
  s.Feed("\r100%\r\n");
  // A line that starts with one is the rank's too (attack 86: "\r\n" went out bare).
  CHECK(console == "[r0]:\r[r0]: 10%\r[r0]: 20%\r[r0]:100%\r\n");
  console.clear();
  s.Feed("\r\nnext\n");
  CHECK(console == "[r0]:\r\n[r0]:next\n");
  console.clear();
  Stream plain("", &turn, &console);
  plain.Feed("\r 10%");
  plain.ShowPending();
  plain.Feed("\r 20%\n");
  CHECK(console == "\r 10%\r 20%\n");
}

TEST_CASE("another stream's line ends an unfinished line first, which then is not ended twice") {
  ConsoleTurn turn;
  std::string console;
  Stream a("[r0]:", &turn, &console);
  Stream b("[r1]:", &turn, &console);
  a.Feed("\r 10%");
  a.ShowPending();
  CHECK(turn.mid_line == &a.shown);
  b.Feed("warning\n");
  CHECK(console == "[r0]:\r[r0]: 10%\n[r1]:warning\n");
  a.Feed("\r 20%");
  a.ShowPending();
  a.Feed("\n");
  CHECK(console == "[r0]:\r[r0]: 10%\n[r1]:warning\n[r0]:\r[r0]: 20%\n");
  console.clear();
  // Without prefixes, and ended by the stream's own newline right after the break.
  Stream c("", &turn, &console);
  Stream d("", &turn, &console);
  c.Feed("partial");
  c.ShowPending();
  d.Feed("line\n");
  c.Feed("\nnext\n");
  CHECK(console == "partial\nline\nnext\n");
}

TEST_CASE("a line of the launcher's that ended an unfinished line: its rest starts a line") {
  std::atomic<uint64_t> breaks{0};
  ConsoleTurn turn;
  turn.launcher_breaks = &breaks;
  std::string console;
  Stream a("[r0]:", &turn, &console);
  a.Feed("\r 10%");
  a.ShowPending();
  // The console writer ended the line before its own message ("\n[ddprun ...]\n").
  console += "\n[ddprun] message\n";
  breaks = 1;
  a.Feed("\r 20%\n");
  CHECK(console == "[r0]:\r[r0]: 10%\n[ddprun] message\n[r0]:\r[r0]: 20%\n");
  console.clear();
  // Ended by its own newline right after the message: not a second, empty line.
  a.Feed("x");
  a.ShowPending();
  console += "\n[ddprun] again\n";
  breaks = 2;
  a.Feed("\nnext\n");
  CHECK(console == "[r0]:x\n[ddprun] again\n[r0]:next\n");
  // A break counted while no line was unfinished changes nothing.
  console.clear();
  breaks = 3;
  a.Feed("y\n");
  CHECK(console == "[r0]:y\n");
}

TEST_CASE("a stream gone while its line was unfinished leaves no turn behind") {
  ConsoleTurn turn;
  std::string console;
  {
    Stream a("", &turn, &console);
    a.Feed("x");
    a.ShowPending();
    CHECK(turn.mid_line == &a.shown);
  }
  CHECK(turn.mid_line == nullptr);
  Stream b("", &turn, &console);
  b.Feed("y\n");
  CHECK(console == "xy\n");
}

TEST_CASE("a line the splitter cut in pieces is shown once, whatever was shown of it") {
  ConsoleTurn turn;
  std::string console;
  LineSplitter splitter(4);
  ShownStream s("", &turn);
  auto line = [&](std::string_view l) { s.Line(l, console); };
  splitter.Feed("abcdef", line);  // "abcd" emitted, "ef" kept
  s.Partial(splitter.pending(), console);
  splitter.Feed("ghij", line);  // "efgh" emitted, of which "ef" was shown
  splitter.Finish(line);
  CHECK(console == "abcdefghij\n");  // one line, as written (a 3 MB line stays one line)
}

TEST_CASE("a line cut in pieces gets its prefix once") {
  ConsoleTurn turn;
  std::string console;
  LineSplitter splitter(4);
  ShownStream p("[r0]:", &turn);
  auto line = [&](std::string_view l) { p.Line(l, console); };
  splitter.Feed("abcdefghij\nk\n", line);
  CHECK(console == "[r0]:abcdefghij\n[r0]:k\n");
}

TEST_CASE("the stream's last line without newline is ended at Finish") {
  ConsoleTurn turn;
  std::string console;
  Stream s("[r0]:", &turn, &console);
  s.Feed("bye");
  s.ShowPending();
  s.Finish();
  CHECK(console == "[r0]:bye\n");
}

}  // namespace
}  // namespace ddprun::supervisor
