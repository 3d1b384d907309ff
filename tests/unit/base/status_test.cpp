#include "base/status.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

namespace ddprun {
namespace {

struct Death {
  int signal = 0;   // the signal that ended the child, 0 if it exited
  std::string err;  // what it wrote to stderr
};

// Runs `body` in a forked child with stderr on a pipe; the child _exits 0 if
// body returns. A death test: the child runs test code, not an exec.
Death RunInChild(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    body();
    _exit(0);
  }
  close(fds[1]);
  Death d;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) d.err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) d.signal = WTERMSIG(status);
  return d;
}

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
    const Death d = RunInChild([&read] {
      StatusOr<std::string> s = Unavailable("connect node3:29500: connection refused");
      read(s);
    });
    CHECK(d.signal == SIGABRT);
    CHECK(d.err.find("value of a StatusOr holding an error: unavailable: connect "
                     "node3:29500: connection refused") != std::string::npos);
  }
}

TEST_CASE("a StatusOr built from an ok Status aborts") {
  const Death d = RunInChild([] { StatusOr<int> s = Status::Ok(); });
  CHECK(d.signal == SIGABRT);
  CHECK(d.err.find("StatusOr constructed from an ok Status") != std::string::npos);
}

}  // namespace
}  // namespace ddprun
