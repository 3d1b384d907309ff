#include "supervisor/containment.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "env/processes.hpp"

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

// Forks a child that starts a session of its own, forks `sleep` there with an
// empty environment, tells us its pid, and exits: the sleep is an orphan that
// carries no mark. Returns the orphan's pid (the child is reaped).
pid_t OrphanWithoutEnvironment() {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  if (child == 0) {
    setsid();
    pid_t orphan = fork();
    if (orphan == 0) {
      char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
      char* envp[] = {nullptr};
      execve("/bin/sleep", argv, envp);
      _exit(127);
    }
    (void)!write(fds[1], &orphan, sizeof(orphan));
    _exit(0);
  }
  close(fds[1]);
  pid_t orphan = -1;
  CHECK(read(fds[0], &orphan, sizeof(orphan)) == sizeof(orphan));
  close(fds[0]);
  waitpid(child, nullptr, 0);
  return orphan;
}

TEST_CASE("a subreaper's sweep kills the tree below it, environment or not, not its own session") {
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  const pid_t orphan = OrphanWithoutEnvironment();
  REQUIRE(orphan > 0);
  const pid_t helper = SleepWithEnv("B=2");  // in our session: a helper of ours, spared
  const pid_t kept = fork();                 // a worker: a session of its own, reaped by its owner
  if (kept == 0) {
    setsid();
    _exit(7);
  }
  for (int i = 0; i < 200; ++i) {  // the orphan has come to us
    auto e = env::ReadProcEntry(orphan);
    if (e && e->ppid == getpid()) break;
    usleep(10000);
  }
  CHECK(env::ReadProcEntry(orphan)->ppid == getpid());
  CHECK(KillDescendants({kept}, std::chrono::milliseconds(2000)) == 1);
  CHECK(!env::ReadProcEntry(orphan));  // killed and reaped
  CHECK(ReapOrphans({kept}) == 0);
  int status = 0;
  CHECK(waitpid(kept, &status, 0) == kept);  // left for us
  CHECK(WEXITSTATUS(status) == 7);
  CHECK(waitpid(helper, &status, WNOHANG) == 0);  // alive
  kill(helper, SIGKILL);
  waitpid(helper, nullptr, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace ddprun::supervisor
