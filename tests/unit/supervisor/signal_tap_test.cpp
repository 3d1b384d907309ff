// The signal tap with real signals: each delivery reaches the loop with its
// sender's pid, in order, and after the tap the signal stays caught.
#include "supervisor/signal_tap.hpp"

#include "supervisor/late_signals.hpp"
#include "tests/unit/base/child_test_util.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>
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

TEST_CASE("a signal after the supervisor's handlers are gone says the exit code it gives") {
  // Found by an attacking helper: Ctrl-C, then SIGTERM as ddprun exited: exit 143 with only
  // SIGINT ever mentioned.
  const auto end = test::RunInChild([] {
    CatchLate(SIGTERM, /*ignore=*/false);
    raise(SIGTERM);
  });
  CHECK(end.exit_code == 143);
  CHECK(end.err == "ddprun: received SIGTERM while exiting: exit code 143\n");
}

TEST_CASE("counted signals are counted as they arrive, then handled as before") {
  const auto end = test::RunInChild([] {
    static volatile sig_atomic_t handled = 0;
    signal(SIGUSR2, [](int) { handled = 1; });
    CountDeliveries(SIGUSR2);
    CountDeliveries(SIGUSR2);  // once is enough: never chained to itself
    const unsigned before = CountedDeliveries();
    raise(SIGUSR2);
    raise(SIGUSR2);
    if (CountedDeliveries() != before + 2 || handled != 1) _exit(3);
  });
  CHECK(end.err.empty());
  CHECK(end.exit_code == 0);
}

}  // namespace
}  // namespace ddprun::supervisor
