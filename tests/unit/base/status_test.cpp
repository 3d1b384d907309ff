#include "base/status.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/unit/base/child_test_util.hpp"

namespace ddprun {
namespace {

using test::RunInChild;

TEST_CASE("a StatusOr's value is read when it holds one") {
  StatusOr<std::string> s = std::string("v");
  REQUIRE(s.ok());
  CHECK(*s == "v");
  CHECK(s->size() == 1);
  CHECK(s.value_or("x") == "v");
  CHECK(std::move(s).value() == "v");
}

TEST_CASE("an error StatusOr gives its status and the fallback of value_or") {
  StatusOr<int> s = NotFound("key /x");
  CHECK_FALSE(s.ok());
  CHECK(s.status().code() == StatusCode::kNotFound);
  CHECK(s.value_or(7) == 7);
}

TEST_CASE("reading the value of an error StatusOr aborts naming the error") {
  for (const auto& read : std::vector<std::function<void(StatusOr<std::string>&)>>{
           [](StatusOr<std::string>& s) { (void)*s; },
           [](StatusOr<std::string>& s) { (void)s->size(); },
           [](StatusOr<std::string>& s) { (void)s.value(); },
           [](StatusOr<std::string>& s) { (void)std::move(s).value(); }}) {
    const auto d = RunInChild([&read] {
      StatusOr<std::string> s = Unavailable("connect node3:29500: connection refused");
      read(s);
    });
    CHECK(d.signal == SIGABRT);
    CHECK(d.err.find("value of a StatusOr holding an error: unavailable: connect "
                     "node3:29500: connection refused") != std::string::npos);
  }
}

TEST_CASE("a StatusOr built from an ok Status aborts") {
  const auto d = RunInChild([] { StatusOr<int> s = Status::Ok(); });
  CHECK(d.signal == SIGABRT);
  CHECK(d.err.find("StatusOr constructed from an ok Status") != std::string::npos);
}

}  // namespace
}  // namespace ddprun
