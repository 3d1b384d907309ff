#include "env/cpu_list.hpp"

#include <doctest/doctest.h>

namespace ddprun::env {
namespace {

TEST_CASE("cpu list: ranges, single CPUs and sysfs's trailing newline parse") {
  CHECK(ParseCpuList("0-3,8-11\n") == CpuList{0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(ParseCpuList("5") == CpuList{5});
  CHECK(ParseCpuList("") == CpuList{});
  CHECK(ParseCpuList("\n") == CpuList{});
  CHECK(ParseCpuList("8,0-1,1") == CpuList{0, 1, 8});
}

TEST_CASE("cpu list: malformed text is refused") {
  for (const char* bad : {"3-1", "-1", "a", "1,,2", ",", "1-", "1-2-3", " 1", "0x1", "2000000"}) {
    CAPTURE(bad);
    CHECK_FALSE(ParseCpuList(bad).has_value());
  }
}

TEST_CASE("cpu list: formatted in the shortest range form, read back the same") {
  CHECK(FormatCpuList({0, 1, 2, 3, 8, 9, 10, 11}) == "0-3,8-11");
  CHECK(FormatCpuList({0, 2, 4}) == "0,2,4");
  CHECK(FormatCpuList({7}) == "7");
  CHECK(FormatCpuList({}).empty());
  const CpuList cpus{0, 1, 5, 6, 7, 9, 63, 64};
  CHECK(ParseCpuList(FormatCpuList(cpus)) == cpus);
}

TEST_CASE("cpu list: the intersection keeps the CPUs in both") {
  CHECK(Intersect({0, 1, 2, 3}, {2, 3, 4}) == CpuList{2, 3});
  CHECK(Intersect({0, 1}, {}).empty());
}

}  // namespace
}  // namespace ddprun::env
