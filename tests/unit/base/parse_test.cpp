// The one grammar for values users give: integers, seconds, choices, names.
#include "base/parse.hpp"

#include <doctest/doctest.h>

namespace ddprun {
namespace {

std::string Message(const Status& s) {
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  return s.message();
}

TEST_CASE("integers: decimal digits in range, nothing else") {
  CHECK(*ParseInteger("--n", "42", 0, 100, "") == 42);
  CHECK(*ParseInteger("--n", "-7", -10, 10, "") == -7);
  for (const char* bad :
       {"", " 1", "1 ", "+1", "1.0", "1e2", "0x10", "101", "-1", "one", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK(Message(ParseInteger("--n", bad, 0, 100, "a number from 0 to 100").status()) ==
          std::string("invalid --n=") + bad + ": a number from 0 to 100");
  }
}

TEST_CASE("integers and seconds as Python writes them, when asked") {
  constexpr auto kPython = Spelling::kPython;
  CHECK(*ParseInteger("--n", " +1_0\n", 0, 100, "", kPython) == 10);
  CHECK(*ParseInteger("--n", "-0_7", -10, 10, "", kPython) == -7);
  CHECK(ParseSeconds("--t", "\t+.5 ", false, kPython)->count() == doctest::Approx(0.5));
  CHECK(ParseSeconds("--t", "1_0.2_5", false, kPython)->count() == doctest::Approx(10.25));
  for (const char* bad : {"", " ", "+", "+-1", "-+1", "++1", "_1", "1_", "1__0", "1_.5", "1 0"}) {
    CAPTURE(bad);
    // The message quotes the value as given.
    CHECK(Message(ParseInteger("--n", bad, -100, 100, "n", kPython).status()) ==
          std::string("invalid --n=") + bad + ": n");
    CHECK_FALSE(ParseSeconds("--t", bad, true, kPython).ok());
  }
}

TEST_CASE("seconds: finite, bounded, zero only when allowed") {
  CHECK(ParseSeconds("--t", "30", false)->count() == doctest::Approx(30));
  CHECK(ParseSeconds("--t", "0.25", false)->count() == doctest::Approx(0.25));
  CHECK(ParseSeconds("--t", "1e3", false)->count() == doctest::Approx(1000));
  CHECK(ParseSeconds("--t", "0", true)->count() == 0);
  CHECK(Message(ParseSeconds("--t", "0", false).status()) ==
        "invalid --t=0: a number of seconds > 0 and at most 1e9, such as 30 or 0.5");
  for (const char* bad : {"nan", "NAN", "-nan", "inf", "infinity", "-inf", "1e10", "-1", "", " 1",
                          "1s", "+1", "0x1p3", "1,5"}) {
    CAPTURE(bad);
    CHECK(Message(ParseSeconds("--t", bad, true).status()) ==
          std::string("invalid --t=") + bad +
              ": a number of seconds >= 0 and at most 1e9, such as 30 or 0.5");
  }
}

TEST_CASE("choices: exact by default, any case when asked, listed on error") {
  CHECK(*ParseChoice("--m", "fork", {"spawn", "fork", "forkserver"}) == 1);
  CHECK(Message(ParseChoice("--m", "Fork", {"spawn", "fork", "forkserver"}).status()) ==
        "invalid --m=Fork: spawn, fork or forkserver");
  CHECK(*ParseChoice("L", "Info", {"DEBUG", "INFO"}, /*ignore_case=*/true) == 1);
  CHECK(Message(ParseChoice("L", "x", {"a", "b"}).status()) == "invalid L=x: a or b");
}

TEST_CASE("names: safe characters, not starting with a dot, bounded") {
  CHECK(CheckName("--role", "trainer_1.a-B", 16).ok());
  CHECK(Message(CheckName("--role", "a\nb\x01", 16)) ==
        "invalid --role=a\\nb\\x01: 1 to 16 characters from A-Z, a-z, 0-9, '.', '_' and '-', not "
        "starting with '.'");
  for (const char* bad : {"", ".", "..", ".x", "a/b", "../x", "a b", "a:b", "12345678901234567"}) {
    CAPTURE(bad);
    CHECK_FALSE(CheckName("--rdzv_id", bad, 16).ok());
  }
}

}  // namespace
}  // namespace ddprun
