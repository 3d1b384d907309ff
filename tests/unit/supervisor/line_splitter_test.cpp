#include "supervisor/line_splitter.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace ddprun::supervisor {
namespace {

std::vector<std::string> Run(LineSplitter& s, const std::vector<std::string>& chunks, bool finish) {
  std::vector<std::string> lines;
  auto emit = [&](std::string_view l) { lines.emplace_back(l); };
  for (const auto& c : chunks) s.Feed(c, emit);
  if (finish) s.Finish(emit);
  return lines;
}

TEST_CASE("lines split across reads come out whole") {
  LineSplitter s;
  CHECK(Run(s, {"ab", "c\nde", "f\ng\n"}, false) ==
        std::vector<std::string>{"abc\n", "def\n", "g\n"});
}

TEST_CASE("a last line without newline is kept and ended at Finish") {
  LineSplitter s;
  CHECK(Run(s, {"x\ny"}, true) == std::vector<std::string>{"x\n", "y\n"});
  CHECK(Run(s, {}, true).empty());
}

TEST_CASE("an overlong line comes in bounded pieces, with nothing added") {
  LineSplitter s(4);
  CHECK(Run(s, {"abcdefghij\n"}, false) == std::vector<std::string>{"abcd", "efgh", "ij\n"});
  CHECK(Run(s, {"abcdefgh"}, true) ==
        std::vector<std::string>{"abcd", "efgh\n"});  // ended at Finish
}

TEST_CASE("empty lines are lines") {
  LineSplitter s;
  CHECK(Run(s, {"\n\n"}, false) == std::vector<std::string>{"\n", "\n"});
}

}  // namespace
}  // namespace ddprun::supervisor
