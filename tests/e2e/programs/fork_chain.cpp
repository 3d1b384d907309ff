// A daemon that never stays: it ignores SIGTERM, leaves its session, and then
// forever forks a child that does the same while it exits at once, so that no
// one process lives longer than a fork (tests/e2e/test_orphans.py). Each
// generation exits as the launcher's adopted orphan: a storm of SIGCHLD.
// fork_chain DEADLINE BEAT: the chain ends by itself at DEADLINE (seconds since
// the epoch), so that one nobody caught cannot outlive its test and fill the
// host's process table; while it lives it touches the file BEAT every 50 ms
// (no one generation lives long enough to be found in /proc).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>

int main(int argc, char** argv) {
  const long deadline = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 0;
  const char* beat = argc > 2 ? argv[2] : nullptr;
  signal(SIGTERM, SIG_IGN);
  setsid();
  timespec last{};  // inherited by each generation
  for (;;) {
    if (std::time(nullptr) >= deadline) _exit(0);
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (beat != nullptr &&
        (now.tv_sec - last.tv_sec) * 1000000000L + now.tv_nsec - last.tv_nsec >= 50000000L) {
      utimensat(AT_FDCWD, beat, nullptr, 0);
      last = now;
    }
    const pid_t child = fork();
    if (child < 0) {
      usleep(1000);
      continue;
    }
    if (child > 0) _exit(0);
    setsid();
  }
}
