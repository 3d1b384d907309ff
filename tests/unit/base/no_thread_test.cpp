// WhyNoThread: the limits that decide whether a thread starts, read when one
// did not.
#include "base/no_thread.hpp"
#include "base/user_threads.hpp"

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

bool Has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST_CASE("WhyNoThread names the address-space cap and each thread's stack under it") {
  rlimit as{}, stack{};
  REQUIRE(getrlimit(RLIMIT_AS, &as) == 0);
  REQUIRE(getrlimit(RLIMIT_STACK, &stack) == 0);
  if (as.rlim_max != RLIM_INFINITY || stack.rlim_cur == RLIM_INFINITY) {
    MESSAGE("skipped: needs a lifted ulimit -v and a finite ulimit -s");
    return;
  }
  rlimit capped = as;
  capped.rlim_cur = rlim_t{64} << 30;  // the soft limit only: raised back below
  REQUIRE(setrlimit(RLIMIT_AS, &capped) == 0);
  const std::string why = WhyNoThread();
  REQUIRE(setrlimit(RLIMIT_AS, &as) == 0);
  CHECK(Has(why,
            " (a thread could not be started: RLIMIT_AS (ulimit -v) is 64.0 GiB, each "
            "thread's stack "));
  CHECK(Has(why, "of it (ulimit -s): raise or lift ulimit -v"));
  // No cap: out of memory or a cgroup's limit, with the thread limit's numbers.
  CHECK(Has(WhyNoThread(),
            "out of memory, or the cgroup's pids.max is reached; RLIMIT_NPROC "
            "(ulimit -u) is soft "));
}

TEST_CASE("TopThreadHolders: the most threads first, by pid among equals, at most n") {
  const std::vector<ProcessThreads> top =
      TopThreadHolders({{7, 3, "a"}, {5, 40, "b"}, {2, 3, "c"}, {9, 1, "d"}}, 3);
  REQUIRE(top.size() == 3);
  CHECK(top[0].pid == 5);
  CHECK(top[1].pid == 2);
  CHECK(top[2].pid == 7);
  CHECK(TopThreadHolders({}, 3).empty());
}

}  // namespace
}  // namespace ddprun
