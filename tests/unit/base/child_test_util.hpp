// A death test's child: `body` run in a forked process with its stderr on a
// pipe (the child _exits 0 if body returns), and how it ended. The child runs
// test code, not an exec.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace ddprun::test {

struct ChildEnd {
  int exit_code = -1;  // -1 when a signal ended it
  int signal = 0;      // the signal that ended it, 0 if it exited
  std::string err;     // what it wrote to stderr
};

inline ChildEnd RunInChild(const std::function<void()>& body) {
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
  ChildEnd end;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) end.err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  return end;
}

}  // namespace ddprun::test
