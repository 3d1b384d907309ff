// The signal tap with real signals: each delivery reaches the loop with its
// sender's pid, in order, and after the tap the signal stays caught.
#include "supervisor/signal_tap.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <utility>
#include <vector>

namespace ddprun::supervisor {
namespace {

// Runs the loop until `want` deliveries arrived (or a bounded number of turns).
void RunUntil(uv_loop_t* loop, const std::vector<std::pair<int, pid_t>>& got, size_t want) {
  for (int turn = 0; turn < 200 && got.size() < want; ++turn) {
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(5000);
  }
}

TEST_CASE("the signal tap hands each delivery to the loop with the sender's pid") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  std::vector<std::pair<int, pid_t>> got;
  {
    auto tap = SignalTap::Start(&loop, {SIGUSR1, SIGUSR2},
                                [&](int sig, pid_t sender) { got.emplace_back(sig, sender); });
    REQUIRE(tap.ok());
    // From this process, then from a child: the sender is whoever called kill().
    REQUIRE(kill(getpid(), SIGUSR1) == 0);
    RunUntil(&loop, got, 1);
    const pid_t parent = getpid();
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      kill(parent, SIGUSR2);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    RunUntil(&loop, got, 2);
    CHECK(got == std::vector<std::pair<int, pid_t>>{{SIGUSR1, getpid()}, {SIGUSR2, child}});
    (*tap)->Close();
    uv_run(&loop, UV_RUN_DEFAULT);
  }
  // The tap is gone: the signal is still caught (late_signals), never fatal.
  REQUIRE(kill(getpid(), SIGUSR1) == 0);
  CHECK(got.size() == 2);
  uv_loop_close(&loop);
}

TEST_CASE("only one signal tap per process") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  {
    auto first = SignalTap::Start(&loop, {SIGUSR2}, [](int, pid_t) {});
    REQUIRE(first.ok());
    auto second = SignalTap::Start(&loop, {SIGUSR2}, [](int, pid_t) {});
    CHECK_FALSE(second.ok());
    (*first)->Close();
    uv_run(&loop, UV_RUN_DEFAULT);
  }
  uv_loop_close(&loop);
}

}  // namespace
}  // namespace ddprun::supervisor
