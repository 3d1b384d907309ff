// Text for messages: what a worker printed, shown so a terminal cannot act on it.
#include "base/format.hpp"

#include <doctest/doctest.h>

namespace ddprun {
namespace {

TEST_CASE("FormatSeconds gives tenths, and a time under 0.05 s two digits, never 0") {
  CHECK(FormatSeconds(600) == "600");
  CHECK(FormatSeconds(2.54) == "2.5");
  CHECK(FormatSeconds(0.05) == "0.1");
  CHECK(FormatSeconds(0.04) == "0.04");  // "0 s" read as no limit (attack 98)
  CHECK(FormatSeconds(0.001) == "0.001");
  CHECK(FormatSeconds(0.012) == "0.012");  // not 0.01 (attack 100)
  CHECK(FormatSeconds(0.049) == "0.049");
  CHECK(FormatSeconds(0) == "0");
}

TEST_CASE("Printable keeps UTF-8 text and escapes what a terminal would act on") {
  CHECK(Printable("loss 0.5\tcafé ✓ 🚀", 100) == "loss 0.5\tcafé ✓ 🚀");
  // Clear screen and cursor home, a carriage return, DEL, NUL, a C1 CSI (U+009B).
  const std::string controls = std::string("a\x1b[2J\x1b[Hb\rc\x7f") + '\0' + "\xc2\x9b";
  CHECK(Printable(controls, 100) == "a\\x1b[2J\\x1b[Hb\\x0dc\\x7f\\x00\\xc2\\x9b");
}

TEST_CASE("Printable writes bytes that are no UTF-8 as \\xNN") {
  CHECK(Printable("\xff\xfe ok", 100) == "\\xff\\xfe ok");
  CHECK(Printable("\xc3", 100) == "\\xc3");                             // cut off
  CHECK(Printable("\x80x", 100) == "\\x80x");                           // a stray continuation byte
  CHECK(Printable("\xc0\xaf", 100) == "\\xc0\\xaf");                    // overlong '/'
  CHECK(Printable("\xed\xa0\x80", 100) == "\\xed\\xa0\\x80");           // a surrogate
  CHECK(Printable("\xf4\x90\x80\x80", 100) == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST_CASE("Printable cuts at a character's start") {
  CHECK(Printable("abc", 3) == "abc");
  CHECK(Printable("abcd", 3) == "abc...");
  // "é" is two bytes: a cut after 3 bytes of "aéé" keeps "aé".
  CHECK(Printable("a\xc3\xa9\xc3\xa9", 4) == "a\xc3\xa9...");
  CHECK(Printable("", 3).empty());
}

}  // namespace
}  // namespace ddprun
