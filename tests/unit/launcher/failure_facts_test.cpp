#include "launcher/failure_facts.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace ddprun::launcher {
namespace {

Program Run(std::string path) {
  Program p;
  p.argv = {std::move(path)};
  return p;
}

TEST_CASE("a shell by name, or a script whose #! line names one, runs a shell") {
  CHECK(RunsAShell(Run("/bin/sh")));
  CHECK(RunsAShell(Run("/usr/bin/bash")));
  CHECK(RunsAShell(Run("zsh")));
  CHECK_FALSE(RunsAShell(Run("/usr/bin/python3")));
  CHECK_FALSE(RunsAShell(Program{}));

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("runs_a_shell_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "direct.sh") << "#!/bin/bash -e\necho hi\n";
  std::ofstream(dir / "via_env.sh") << "#! /usr/bin/env dash\necho hi\n";
  std::ofstream(dir / "python.py") << "#!/usr/bin/env python3\nprint(1)\n";
  std::ofstream(dir / "binary") << "\x7f"
                                   "ELF";
  CHECK(RunsAShell(Run((dir / "direct.sh").string())));
  CHECK(RunsAShell(Run((dir / "via_env.sh").string())));
  CHECK_FALSE(RunsAShell(Run((dir / "python.py").string())));
  CHECK_FALSE(RunsAShell(Run((dir / "binary").string())));
  CHECK_FALSE(RunsAShell(Run((dir / "missing").string())));
  // Under Python (a .py program): never a shell.
  Program py = Run("/bin/sh");
  py.interpreter = "/usr/bin/python3";
  CHECK_FALSE(RunsAShell(py));
  fs::remove_all(dir);
}

supervisor::WorkerRecord Worker(int rank, supervisor::WorkerState state,
                                supervisor::WallTime exit_time) {
  supervisor::WorkerRecord w;
  w.rank = w.local_rank = rank;
  w.pid = 1000 + rank;
  w.state = state;
  w.exit_time = exit_time;
  return w;
}

TEST_CASE("failure facts: the ranks that had exited 0 before the root cause, and how long before") {
  using std::chrono::milliseconds;
  using supervisor::WorkerState;
  const supervisor::WallTime failed_at = std::chrono::system_clock::now();
  supervisor::GroupResult result;
  result.workers = {Worker(0, WorkerState::kFailed, failed_at),
                    Worker(1, WorkerState::kSucceeded, failed_at - milliseconds(2500)),
                    Worker(2, WorkerState::kSucceeded, failed_at - milliseconds(400)),
                    Worker(3, WorkerState::kSucceeded, failed_at + milliseconds(100)),
                    Worker(4, WorkerState::kStopped, failed_at + milliseconds(200))};
  supervisor::FailureRecord root;
  root.pid = 1000;
  FailureFacts facts;
  facts.GroupFailed(5, result, root);
  const auto x = facts.Context(LaunchConfig{}, Run("/bin/true"), {}, "");
  CHECK(x.finished_ranks == std::vector<int>{1, 2});  // rank 3 ended after it
  CHECK(x.finished_seconds_before == doctest::Approx(0.4));

  // No rank had finished.
  result.workers[1].state = result.workers[2].state = WorkerState::kStopped;
  facts.GroupFailed(5, result, root);
  CHECK(facts.Context(LaunchConfig{}, Run("/bin/true"), {}, "").finished_ranks.empty());
}

TEST_CASE("failure facts: the PyTorch hook's record names the rank that never came") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("torch_facts_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "progress_0") << "4 gloo:all_reduce entered 0 * default_pg\n";
  std::ofstream(dir / "progress_1") << "3 gloo:all_reduce retired 0 * default_pg\n";
  std::vector<supervisor::WorkerSpec> specs(2);
  for (int r = 0; r < 2; ++r) {
    specs[r].rank = specs[r].local_rank = r;
    specs[r].envp = {"DDPRUN_TORCH_DIR=" + dir.string(), "RANK=" + std::to_string(r)};
  }
  const supervisor::WallTime now = std::chrono::system_clock::now();
  supervisor::GroupResult result;
  result.workers = {Worker(0, supervisor::WorkerState::kFailed, now),
                    Worker(1, supervisor::WorkerState::kStopped, now)};
  supervisor::FailureRecord root;
  root.pid = 1000;
  FailureFacts facts;
  facts.GroupStarting(specs);
  facts.GroupFailed(2, result, root);
  CHECK(facts.Context(LaunchConfig{}, Run("/bin/true"), {}, "").torch_laggards ==
        "rank 1 did not enter gloo:all_reduce #4 (rank 0 waits in it)");
  // Level: no one is named.
  std::ofstream(dir / "progress_1") << "4 gloo:all_reduce entered 0 * default_pg\n";
  facts.GroupFailed(2, result, root);
  CHECK(facts.Context(LaunchConfig{}, Run("/bin/true"), {}, "").torch_laggards.empty());
  // Without the hook (no DDPRUN_TORCH_DIR): nothing read.
  for (auto& spec : specs) spec.envp.erase(spec.envp.begin());
  std::ofstream(dir / "progress_1") << "3 gloo:all_reduce retired 0 * default_pg\n";
  facts.GroupStarting(specs);
  facts.GroupFailed(2, result, root);
  CHECK(facts.Context(LaunchConfig{}, Run("/bin/true"), {}, "").torch_laggards.empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::launcher
