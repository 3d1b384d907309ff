// The file timer's requests (as torch's FileTimerClient writes them), the
// timer table and the worker a pid belongs to, with made-up times and trees.
#include "supervisor/file_timer.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <csignal>
#include <map>
#include <string>
#include <vector>

namespace ddprun::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

WallTime At(double s) {
  return WallTime(std::chrono::duration_cast<WallTime::duration>(Duration(s)));
}

TimerRequest Acquire(pid_t pid, std::string scope, double expires, int sig = SIGKILL) {
  return {pid, std::move(scope), At(expires), sig};
}

TimerRequest Release(pid_t pid, std::string scope) { return {pid, std::move(scope), {}, 0}; }

TEST_CASE("an acquire request as torch's FileTimerClient writes it parses") {
  auto r = ParseTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "train.py#17", "expiration_time": )"
      R"(1700000000.25, "signal": 9})"
      "\n");
  REQUIRE(r.ok());
  CHECK(r->pid == 4242);
  CHECK(r->scope == "train.py#17");
  REQUIRE(r->expires.has_value());
  CHECK(*r->expires == At(1700000000.25));
  CHECK(r->signal == SIGKILL);
}

TEST_CASE("a negative expiration time is a release") {
  auto r = ParseTimerRequest(
      R"({"version": 1, "pid": 7, "scope_id": "s", "expiration_time": -1, "signal": 0})");
  REQUIRE(r.ok());
  CHECK_FALSE(r->expires.has_value());
  CHECK(r->signal == 0);
}

TEST_CASE("malformed requests are refused naming what is wrong") {
  const std::map<std::string, std::string> cases = {
      {"", "not a JSON object"},
      {"{\"pid\": 1,", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {R"({"scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\""},
      {R"({"pid": -3, "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\""},
      {R"({"pid": 1.5, "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\""},
      {R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\""},
      {R"({"pid": 1, "scope_id": 3, "expiration_time": 1, "signal": 9})", "\"scope_id\""},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": "soon", "signal": 9})",
       "\"expiration_time\""},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": 1})", "\"signal\""},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 65})", "\"signal\""},
  };
  for (const auto& one : cases) {
    const auto& line = one.first;
    const auto& field = one.second;
    CAPTURE(line);
    auto r = ParseTimerRequest(line);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find(field) != std::string::npos);
  }
}

TEST_CASE("a timer expires at its expiration time, not before, and only once") {
  TimerTable t;
  t.Apply(Acquire(10, "step", 105.0), At(100.0));
  CHECK(t.NextExpiry() == At(105.0));
  CHECK(t.TakeExpired(At(104.9)).empty());
  auto expired = t.TakeExpired(At(105.5));
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == 10);
  CHECK(expired[0].scope == "step");
  CHECK(expired[0].signal == SIGKILL);
  CHECK(expired[0].held.count() == doctest::Approx(5.5));
  CHECK(expired[0].limit.count() == doctest::Approx(5.0));
  CHECK(t.size() == 0);
  CHECK_FALSE(t.NextExpiry().has_value());
  CHECK(t.TakeExpired(At(200.0)).empty());
}

TEST_CASE("a release disarms only its own (pid, scope); acquiring again replaces") {
  TimerTable t;
  t.Apply(Acquire(10, "a", 105.0), At(100.0));
  t.Apply(Acquire(10, "b", 106.0), At(100.0));
  t.Apply(Acquire(11, "a", 107.0), At(100.0));
  t.Apply(Release(10, "a"), At(101.0));
  t.Apply(Release(12, "a"), At(101.0));  // never acquired: nothing
  CHECK(t.size() == 2);
  t.Apply(Acquire(11, "a", 120.0), At(102.0));
  CHECK(t.NextExpiry() == At(106.0));
  auto expired = t.TakeExpired(At(110.0));
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == 10);
  CHECK(expired[0].scope == "b");
  auto later = t.TakeExpired(At(120.0));
  REQUIRE(later.size() == 1);
  CHECK(later[0].held.count() == doctest::Approx(18.0));  // from the second acquire
}

TEST_CASE("several expired timers of one pid give one expiry: the earliest with a signal") {
  TimerTable t;
  t.Apply(Acquire(10, "no-signal", 101.0, 0), At(100.0));
  t.Apply(Acquire(10, "late", 103.0, SIGKILL), At(100.0));
  t.Apply(Acquire(10, "early", 102.0, SIGTERM), At(100.0));
  t.Apply(Acquire(10, "not-yet", 150.0), At(100.0));
  t.Apply(Acquire(20, "quiet", 101.0, 0), At(100.0));
  auto expired = t.TakeExpired(At(104.0));
  REQUIRE(expired.size() == 2);
  CHECK(expired[0].pid == 10);
  CHECK(expired[0].scope == "early");
  CHECK(expired[0].signal == SIGTERM);
  CHECK(expired[1].pid == 20);
  CHECK(expired[1].signal == 0);  // none asked: the caller does not reap it
  CHECK(t.size() == 0);           // as torch, every timer of a reaped pid goes
}

TEST_CASE("a postponed timer expires that much later and its hold leaves the pause out") {
  TimerTable t;
  t.Apply(Acquire(10, "step", 105.0), At(100.0));
  t.Postpone(Duration(20.0));  // the whole job was frozen for 20 s
  CHECK(t.NextExpiry() == At(125.0));
  CHECK(t.TakeExpired(At(124.0)).empty());
  auto expired = t.TakeExpired(At(126.0));
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].held.count() == doctest::Approx(6.0));
  CHECK(expired[0].limit.count() == doctest::Approx(5.0));
}

TEST_CASE("clearing the table drops every timer") {
  TimerTable t;
  t.Apply(Acquire(10, "a", 105.0), At(100.0));
  t.Clear();
  CHECK(t.TakeExpired(At(1000.0)).empty());
}

TEST_CASE("request lines are cut at newlines across reads; overlong ones are dropped once") {
  RequestLines lines;
  std::vector<std::string> got;
  int too_long = 0;
  auto line = [&](std::string_view l) { got.emplace_back(l); };
  auto overlong = [&] { ++too_long; };
  lines.Feed("{\"a\":1}\n{\"b\"", line, overlong);
  lines.Feed(":2}\n\n", line, overlong);
  CHECK(got == std::vector<std::string>{"{\"a\":1}", "{\"b\":2}"});
  got.clear();
  const std::string big(kMaxTimerRequest + 1, 'x');
  lines.Feed(big.substr(0, 100), line, overlong);
  lines.Feed(big.substr(100), line, overlong);
  lines.Feed(big, line, overlong);
  CHECK(too_long == 1);
  lines.Feed("tail\n{\"c\":3}\n", line, overlong);
  CHECK(too_long == 1);
  CHECK(got == std::vector<std::string>{"{\"c\":3}"});
  lines.Feed(std::string(kMaxTimerRequest, 'y') + "\n", line, overlong);
  CHECK(got.size() == 2);  // exactly the limit is still a request
}

TEST_CASE("a pid belongs to the worker that is it or its ancestor") {
  // 100, 101: workers; 200 a child of 101; 300 a grandchild of 101; 400 not theirs.
  const std::map<pid_t, pid_t> parents = {{100, 1},   {101, 1},  {200, 101},
                                          {300, 200}, {400, 50}, {50, 1}};
  auto parent_of = [&](pid_t p) {
    auto it = parents.find(p);
    return it == parents.end() ? 0 : it->second;
  };
  const std::vector<pid_t> workers = {100, 101};
  CHECK(OwningWorker(100, workers, parent_of) == 0u);
  CHECK(OwningWorker(101, workers, parent_of) == 1u);
  CHECK(OwningWorker(300, workers, parent_of) == 1u);
  CHECK_FALSE(OwningWorker(400, workers, parent_of).has_value());
  CHECK_FALSE(OwningWorker(1, workers, parent_of).has_value());
  CHECK_FALSE(OwningWorker(999, workers, parent_of).has_value());  // gone
  // A cycle in the parents ends.
  CHECK_FALSE(OwningWorker(7, workers, [](pid_t p) { return p == 7 ? 8 : 7; }).has_value());
}

TEST_CASE("the parent pid comes from /proc") {
  CHECK(ParentPid(getpid()) == getppid());
  CHECK(ParentPid(0x3ffffff0) == 0);
}

}  // namespace
}  // namespace ddprun::supervisor
