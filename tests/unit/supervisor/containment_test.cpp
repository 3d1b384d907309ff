#include "supervisor/containment.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace ddprun::supervisor {
namespace {

// A child that execs sleep with `env` as its whole environment.
pid_t SleepWithEnv(const std::string& entry) {
  pid_t pid = fork();
  if (pid == 0) {
    char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
    char* envp[] = {const_cast<char*>("A=1"), const_cast<char*>(entry.c_str()), nullptr};
    execve("/bin/sleep", argv, envp);
    _exit(127);
  }
  return pid;
}

bool Exited(pid_t pid, int* status) {
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid, status, WNOHANG) == pid) return true;
    usleep(10000);
  }
  return false;
}

TEST_CASE("the sweep kills processes carrying the mark, and only those") {
  const std::string mark = "DDPRUN_PROCESS_TREE=test." + std::to_string(getpid());
  pid_t marked = SleepWithEnv(mark);
  pid_t other = SleepWithEnv(mark + "x");  // a longer token is another job's
  pid_t unmarked = SleepWithEnv("B=2");
  usleep(100000);  // both have exec'd
  CHECK(SweepMarkedProcesses(mark, std::chrono::milliseconds(2000)) == 1);
  int status = 0;
  REQUIRE(Exited(marked, &status));
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(waitpid(other, &status, WNOHANG) == 0);
  CHECK(waitpid(unmarked, &status, WNOHANG) == 0);
  kill(other, SIGKILL);
  kill(unmarked, SIGKILL);
  waitpid(other, nullptr, 0);
  waitpid(unmarked, nullptr, 0);
}

}  // namespace
}  // namespace ddprun::supervisor
