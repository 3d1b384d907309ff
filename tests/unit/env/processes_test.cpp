#include "env/processes.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>

namespace ddprun::env {
namespace {

TEST_CASE("a stat line is read past a name holding spaces and parentheses") {
  const auto e = ParseProcStat(
      "4242 (a) b (c) S 17 4242 4200 34816 4242 4194560 1 0 0 0 5 3 0 0 20 0 1 0 987654 "
      "1234 56 18446744073709551615\n");
  REQUIRE(e);
  CHECK(e->pid == 4242);
  CHECK(e->state == 'S');
  CHECK(e->ppid == 17);
  CHECK(e->session == 4200);
  CHECK(e->start_time == 987654);
  CHECK(!ParseProcStat("4242 (truncated"));
  CHECK(!ParseProcStat("4242 (x) S 1 2 3"));  // no start time
  CHECK(!ParseProcStat(""));
}

TEST_CASE("this process is in the table, as /proc and getppid/getsid say") {
  const auto self = ReadProcEntry(getpid());
  REQUIRE(self);
  CHECK(self->ppid == getppid());
  CHECK(self->session == getsid(0));
  CHECK(self->state == 'R');
  const auto table = ReadProcTable();
  CHECK(std::find(table.begin(), table.end(), *self) != table.end());
}

TEST_CASE("descendants: the whole tree below, parents first, nothing else") {
  // 1 -> 10 -> 11 -> 12; 10 -> 13; 1 -> 20 (another tree); 30 claims to be its own parent.
  std::vector<ProcEntry> table = {{12, 'S', 11}, {20, 'S', 1},  {11, 'S', 10},
                                  {10, 'S', 1},  {13, 'Z', 10}, {30, 'S', 30}};
  std::vector<pid_t> got;
  for (const auto& e : Descendants(table, 10)) got.push_back(e.pid);
  REQUIRE(got.size() == 3);
  CHECK(std::find(got.begin(), got.end(), 20) == got.end());
  CHECK(std::find(got.begin(), got.end(), 11) < std::find(got.begin(), got.end(), 12));
  CHECK(Descendants(table, 12).empty());
  CHECK(Descendants(table, 30).empty());
  CHECK(Descendants(table, 1).size() == 5);
}

}  // namespace
}  // namespace ddprun::env
