#include "supervisor/line_filter.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "supervisor/line_splitter.hpp"

namespace ddprun::supervisor {
namespace {

// What the filtered file gets from `chunks` read through a splitter of
// `max_line` and a filter of `needles`, holding at most `hold` bytes.
std::string Filtered(const std::vector<std::string>& chunks, std::vector<std::string> needles,
                     size_t max_line, size_t hold = size_t{64} << 20) {
  LineSplitter splitter(max_line);
  LineFilter filter(std::move(needles), "[0]:", hold);
  std::string out;
  auto take = [&](std::string_view piece) { filter.Take(piece, out); };
  for (const auto& c : chunks) splitter.Feed(c, take);
  splitter.Finish(take);
  return out;
}

TEST_CASE("lines that contain a filter text are copied with the rank's prefix") {
  CHECK(Filtered({"a loss\nb\nc acc\nloss acc\n"}, {"loss", "acc"}, 1 << 20) ==
        "[0]:a loss\n[0]:c acc\n[0]:loss acc\n");
  CHECK(Filtered({"nothing\n"}, {"loss"}, 1 << 20).empty());
  CHECK(Filtered({"last loss"}, {"loss"}, 1 << 20) == "[0]:last loss\n");  // ended at exit
}

TEST_CASE("an overlong line is matched and copied whole, a text across two pieces too") {
  // Pieces of 4: "aaNE" "EDLE" "bbb\n": the text spans the first two.
  CHECK(Filtered({"aaNEEDLEbbb\n", "short NEEDLE\n"}, {"NEEDLE"}, 4) ==
        "[0]:aaNEEDLEbbb\n[0]:short NEEDLE\n");
  // The match in the last piece copies the line from its beginning.
  CHECK(Filtered({"abcdefghijklNEEDLE\n"}, {"NEEDLE"}, 4) == "[0]:abcdefghijklNEEDLE\n");
  // A match in the first piece copies the rest as it comes.
  CHECK(Filtered({"NEEDLEabcdefghij\nx\n"}, {"NEEDLE"}, 4) == "[0]:NEEDLEabcdefghij\n");
  CHECK(Filtered({"abcdefghijkl\n"}, {"NEEDLE"}, 4).empty());
}

TEST_CASE("a line longer than the filter holds is copied from what it kept, saying so") {
  const std::string out = Filtered({std::string(40, 'a') + "NEEDLE!\n"}, {"NEEDLE"}, 4, 16);
  CHECK(out.rfind("[0]:[ddprun: the first ", 0) == 0);
  CHECK(out.find("bytes of this line are not copied") != std::string::npos);
  CHECK(out.substr(out.size() - 8) == "NEEDLE!\n");
  // The next line starts afresh.
  CHECK(Filtered({std::string(40, 'a') + "\nNEEDLE\n"}, {"NEEDLE"}, 4, 16) == "[0]:NEEDLE\n");
}

}  // namespace
}  // namespace ddprun::supervisor
