#include "env/worker_env.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "base/read_file.hpp"
#include "env/host.hpp"
#include "env/log_layout.hpp"

namespace ddprun::env {
namespace {

GroupInfo Group() {
  GroupInfo g;
  g.local_world_size = 4;
  g.world_size = 8;
  g.group_rank = 1;
  g.group_world_size = 2;
  g.base_rank = 4;
  g.master_addr = "node0";
  g.master_port = 29500;
  g.restart_count = 2;
  g.max_restarts = 3;
  g.run_id = "job7";
  g.signals_to_handle = "SIGTERM,SIGINT";
  return g;
}

TEST_CASE("a worker gets torchrun's variables laid over the launcher's environment") {
  Environ base{{"PATH", "/bin"}, {"CUDA_VISIBLE_DEVICES", "3,4"}};
  WorkerFiles files{"/logs/attempt_2/2/error.json", "/logs/attempt_2/2/heartbeat",
                    "/logs/attempt_2/2/trace.bin", "/logs/attempt_2/dumps", ""};
  auto e = WorkerEnviron(Group(), 2, files, base);
  REQUIRE(e.ok());
  CHECK(e->at("PATH") == "/bin");
  CHECK(e->at("LOCAL_RANK") == "2");
  CHECK(e->at("RANK") == "6");
  CHECK(e->at("ROLE_RANK") == "6");
  CHECK(e->at("GROUP_RANK") == "1");
  CHECK(e->at("LOCAL_WORLD_SIZE") == "4");
  CHECK(e->at("WORLD_SIZE") == "8");
  CHECK(e->at("ROLE_WORLD_SIZE") == "8");
  CHECK(e->at("GROUP_WORLD_SIZE") == "2");
  CHECK(e->at("ROLE_NAME") == "default");
  CHECK(e->at("MASTER_ADDR") == "node0");
  CHECK(e->at("MASTER_PORT") == "29500");
  CHECK(e->at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(e->at("TORCHELASTIC_MAX_RESTARTS") == "3");
  CHECK(e->at("TORCHELASTIC_RUN_ID") == "job7");
  CHECK(e->at("TORCHELASTIC_USE_AGENT_STORE") == "False");
  CHECK(e->at("TORCHELASTIC_ERROR_FILE") == "/logs/attempt_2/2/error.json");
  CHECK(e->at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(e->at("OMP_NUM_THREADS") == "1");
  CHECK(e->at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT");
  CHECK(e->at("CUDA_VISIBLE_DEVICES") == "3,4");  // passed through
  CHECK(e->at("DDPRUN_HEARTBEAT_FILE") == "/logs/attempt_2/2/heartbeat");
  CHECK(e->at("DDPRUN_TRACE_FILE") == "/logs/attempt_2/2/trace.bin");
  CHECK(e->at("DDPRUN_DUMP_DIR") == "/logs/attempt_2/dumps");
}

TEST_CASE("under Slurm a worker's SLURM_* describe the worker, not the agent's task") {
  // The agent is task 1 of a 2-task step (one per node).
  Environ base{{"SLURM_PROCID", "1"},
               {"SLURM_LOCALID", "0"},
               {"SLURM_NODEID", "1"},
               {"SLURM_NTASKS", "2"},
               {"SLURM_NPROCS", "2"},
               {"SLURM_STEP_NUM_TASKS", "2"},
               {"SLURM_TASKS_PER_NODE", "1(x2)"},
               {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
               {"SLURM_GTIDS", "1"},
               {"SLURM_JOB_ID", "57"}};
  GroupInfo g = Group();
  g.slurm_task = true;
  auto e = WorkerEnviron(g, 3, {}, base);
  REQUIRE(e.ok());
  CHECK(e->at("SLURM_PROCID") == "7");
  CHECK(e->at("SLURM_LOCALID") == "3");
  CHECK(e->at("SLURM_NODEID") == "1");
  CHECK(e->at("SLURM_NTASKS") == "8");
  CHECK(e->at("SLURM_NPROCS") == "8");
  CHECK(e->at("SLURM_STEP_NUM_TASKS") == "8");
  CHECK(e->at("SLURM_NTASKS_PER_NODE") == "4");
  CHECK(e->at("SLURM_TASKS_PER_NODE") == "4(x2)");
  CHECK(e->at("SLURM_STEP_TASKS_PER_NODE") == "4(x2)");
  CHECK(e->at("SLURM_GTIDS") == "4,5,6,7");
  CHECK(e->at("SLURM_JOB_ID") == "57");  // the job's own facts stay
  // Nodes of different sizes: no per-node list rather than a wrong one.
  g.world_size = 7;
  auto uneven = WorkerEnviron(g, 0, {}, base);
  REQUIRE(uneven.ok());
  CHECK(uneven->count("SLURM_TASKS_PER_NODE") == 0);
  // Not a Slurm task (or --slurm=off): untouched.
  g.slurm_task = false;
  auto plain = WorkerEnviron(g, 3, {}, base);
  REQUIRE(plain.ok());
  CHECK(plain->at("SLURM_PROCID") == "1");
}

TEST_CASE("under Slurm each worker gets its share of the agent's SLURM_CPUS_PER_TASK") {
  GroupInfo g = Group();  // 4 workers on this node
  g.slurm_task = true;
  for (const auto& shares : std::vector<std::pair<std::string, std::string>>{
           {"8", "2"}, {"9", "2"}, {"3", "1"}, {"0", "0"}, {"x", "x"}, {"", ""}}) {
    CAPTURE(shares.first);
    auto e = WorkerEnviron(g, 1, {}, {{"SLURM_CPUS_PER_TASK", shares.first}});
    REQUIRE(e.ok());
    CHECK(e->at("SLURM_CPUS_PER_TASK") == shares.second);  // nonsense passes on unchanged
  }
  auto none = WorkerEnviron(g, 1, {}, {});
  REQUIRE(none.ok());
  CHECK(none->count("SLURM_CPUS_PER_TASK") == 0);
}

TEST_CASE("without log files ddprun's own variables are set and empty") {
  auto e = WorkerEnviron(Group(), 0, {}, {});
  REQUIRE(e.ok());
  for (const char* name : {"TORCHELASTIC_ERROR_FILE", "DDPRUN_HEARTBEAT_FILE", "DDPRUN_TRACE_FILE",
                           "DDPRUN_DUMP_DIR"}) {
    CHECK(e->at(name).empty());
  }
}

TEST_CASE("an attempt gets per-worker heartbeat files, trace paths and a dump dir") {
  auto root = std::filesystem::temp_directory_path() / "ddprun_layout_test";
  std::filesystem::remove_all(root);
  auto layout = LogLayout::Create(root.string(), "job");
  REQUIRE(layout.ok());
  REQUIRE(layout->PrepareAttempt(1, 1, 2).ok());
  const std::string attempt = layout->AttemptDir(1);
  CHECK(layout->HeartbeatPath(1, 1) == attempt + "/1/heartbeat");
  CHECK(layout->TracePath(1, 0) == attempt + "/0/trace.bin");
  CHECK(layout->DumpDir(1) == attempt + "/dumps");
  CHECK(std::filesystem::is_regular_file(layout->HeartbeatPath(1, 0)));
  CHECK(std::filesystem::file_size(layout->HeartbeatPath(1, 1)) == 0);
  CHECK(std::filesystem::is_directory(layout->DumpDir(1)));
  CHECK_FALSE(std::filesystem::exists(layout->TracePath(1, 0)));  // the worker creates it
  std::filesystem::remove_all(root);

  auto off = LogLayout::Create("/dev/null", "job");
  REQUIRE(off.ok());
  CHECK(off->HeartbeatPath(0, 0).empty());
  CHECK(off->TracePath(0, 0).empty());
  CHECK(off->DumpDir(0).empty());
}

TEST_CASE(
    "a round that keeps the restart count keeps the earlier round's folder, or says why not") {
  namespace fs = std::filesystem;
  auto root = fs::temp_directory_path() / "ddprun_layout_rounds_test";
  fs::remove_all(root);
  auto layout = LogLayout::Create(root.string(), "job");
  REQUIRE(layout.ok());
  const std::string attempt = layout->AttemptDir(0);
  std::string lost;
  REQUIRE(layout->PrepareAttempt(0, 0, 1, &lost).ok());
  REQUIRE(WriteSmallFile(attempt + "/0/stdout.log", "round 0's output\n").ok());
  REQUIRE(layout->PrepareAttempt(0, 1, 1, &lost).ok());  // a node joined: round 1, attempt 0
  CHECK(lost.empty());
  CHECK(ReadSmallFile(attempt + ".round_0/0/stdout.log") == "round 0's output\n");
  CHECK_FALSE(fs::exists(attempt + "/0/stdout.log"));

  // Where round 1's folder cannot be renamed (a non-empty folder holds the name), it is
  // replaced and the caller is told.
  REQUIRE(WriteSmallFile(attempt + "/0/stdout.log", "round 1's output\n").ok());
  fs::create_directories(attempt + ".round_1/x");
  REQUIRE(layout->PrepareAttempt(0, 2, 1, &lost).ok());
  CHECK(lost.find("could not keep rendezvous round 1's worker logs as " + attempt + ".round_1") ==
        0);
  CHECK(lost.find("is emptied for round 2") != std::string::npos);
  CHECK(fs::is_regular_file(layout->HeartbeatPath(0, 0)));
  fs::remove_all(root);
}

TEST_CASE("a log directory that exists but takes no run directory says what to do") {
  // /proc exists, and nobody (root included) makes a directory in it.
  auto layout = LogLayout::Create("/proc", "job");
  REQUIRE_FALSE(layout.ok());
  const std::string m = layout.status().message();
  CHECK(m.rfind("--log_dir /proc: create /proc/job_", 0) == 0);
  CHECK(m.find(": choose a writable directory") != std::string::npos);
}

TEST_CASE("a TMPDIR that is no writable directory falls back as Python's tempfile does") {
  CHECK(TempDirectory("") == "/tmp");
  CHECK_FALSE(TempDirectoryProblem("").has_value());
  CHECK(TempDirectory("/tmp/") == "/tmp");
  CHECK_FALSE(TempDirectoryProblem("/tmp").has_value());
  // A stale one (a finished job's): /tmp, said so; it stopped the launch.
  CHECK(TempDirectory("/no/such/dir") == "/tmp");
  auto problem = TempDirectoryProblem("/no/such/dir");
  REQUIRE(problem.has_value());
  CHECK(problem->find("TMPDIR=/no/such/dir is no writable directory (No such file or directory)") ==
        0);
  CHECK(problem->find("go under /tmp, as Python's tempfile falls back") != std::string::npos);
  CHECK(TempDirectory("/etc/hostname") == "/tmp");
  CHECK(TempDirectoryProblem("/etc/hostname")->find("(not a directory)") != std::string::npos);
}

TEST_CASE("an unset OMP_NUM_THREADS shares the allowed CPUs out among the workers") {
  GroupInfo g = Group();  // 4 workers
  g.allowed_cpus = 8;
  auto e = WorkerEnviron(g, 0, {}, {});
  REQUIRE(e.ok());
  CHECK(e->at("OMP_NUM_THREADS") == "2");
  g.allowed_cpus = 3;
  e = WorkerEnviron(g, 0, {}, {});
  REQUIRE(e.ok());
  CHECK(e->at("OMP_NUM_THREADS") == "1");
}

TEST_CASE("with cpu binding, an unset OMP_NUM_THREADS is each worker's own share") {
  GroupInfo g = Group();  // 4 workers
  g.allowed_cpus = 32;
  g.bound_threads = {8, 8, 4, 12};
  for (int r = 0; r < 4; ++r) {
    auto e = WorkerEnviron(g, r, {}, {});
    REQUIRE(e.ok());
    CHECK(e->at("OMP_NUM_THREADS") == std::to_string(g.bound_threads[r]));
  }
  auto e = WorkerEnviron(g, 0, {}, {{"OMP_NUM_THREADS", "3"}});
  REQUIRE(e.ok());
  CHECK(e->at("OMP_NUM_THREADS") == "3");
}

TEST_CASE("existing OMP_NUM_THREADS and TORCH_NCCL_ASYNC_ERROR_HANDLING are kept") {
  Environ base{{"OMP_NUM_THREADS", "8"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}};
  auto e = WorkerEnviron(Group(), 0, {}, base);
  REQUIRE(e.ok());
  CHECK(e->at("OMP_NUM_THREADS") == "8");
  CHECK(e->at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "3");
}

TEST_CASE("a single worker does not get OMP_NUM_THREADS") {
  GroupInfo g = Group();
  g.local_world_size = 1;
  auto e = WorkerEnviron(g, 0, {}, {});
  REQUIRE(e.ok());
  CHECK(e->count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("TORCHELASTIC_TIMER_FILE is set only when the launcher serves a file timer") {
  Environ base{{"PATH", "/bin"}};
  auto off = WorkerEnviron(Group(), 0, WorkerFiles{}, base);
  REQUIRE(off.ok());
  CHECK(off->count("TORCHELASTIC_TIMER_FILE") == 0);
  GroupInfo g = Group();
  g.timer_file = "/tmp/watchdog_timer_x";
  auto on = WorkerEnviron(g, 3, WorkerFiles{}, base);
  REQUIRE(on.ok());
  CHECK(on->at("TORCHELASTIC_TIMER_FILE") == "/tmp/watchdog_timer_x");
}

TEST_CASE("--gpus sets the device list for every worker") {
  GroupInfo g = Group();
  g.gpus = "0,6,7";
  auto e = WorkerEnviron(g, 1, {}, {{"CUDA_VISIBLE_DEVICES", "1"}});
  REQUIRE(e.ok());
  CHECK(e->at("CUDA_VISIBLE_DEVICES") == "0,6,7");
}

TEST_CASE("--virtual_local_rank narrows to one device and sets LOCAL_RANK=0") {
  GroupInfo g = Group();
  g.virtual_local_rank = true;
  auto e = WorkerEnviron(g, 1, {}, {{"CUDA_VISIBLE_DEVICES", "5,6,7"}});
  REQUIRE(e.ok());
  CHECK(e->at("CUDA_VISIBLE_DEVICES") == "6");
  CHECK(e->at("LOCAL_RANK") == "0");
  CHECK(e->at("RANK") == "5");
  auto none = WorkerEnviron(g, 3, {}, {});
  REQUIRE(none.ok());
  CHECK(none->at("CUDA_VISIBLE_DEVICES") == "3");
  auto too_few = WorkerEnviron(g, 3, {}, {{"CUDA_VISIBLE_DEVICES", "5,6"}});
  REQUIRE_FALSE(too_few.ok());
  CHECK(too_few.status().message().find("CUDA_VISIBLE_DEVICES=5,6") != std::string::npos);
  // As torchrun strips each entry (found by an attacking helper: " 2" was passed on).
  auto spaced = WorkerEnviron(g, 1, {}, {{"CUDA_VISIBLE_DEVICES", " 1, 2"}});
  REQUIRE(spaced.ok());
  CHECK(spaced->at("CUDA_VISIBLE_DEVICES") == "2");
}

TEST_CASE("SplitList") {
  CHECK(SplitList("").empty());
  CHECK(SplitList("a,,b") == std::vector<std::string>{"a", {}, "b"});
}

}  // namespace
}  // namespace ddprun::env

namespace ddprun::env {
namespace {

TEST_CASE("--hang_detect=torch: the hook first on PYTHONPATH, the flight recorder and RAS on") {
  GroupInfo g = Group();
  g.torch_hook_dir = "/run/torch_hook";
  g.nccl_ras_addr = "127.0.0.1:41000";
  WorkerFiles files{"", "", "", "", "/logs/attempt_0/dumps/torch"};
  auto e = WorkerEnviron(g, 0, files, {{"PYTHONPATH", "/mine"}});
  REQUIRE(e.ok());
  CHECK(e->at("PYTHONPATH") == "/run/torch_hook:/mine");
  CHECK(e->at("DDPRUN_TORCH_DIR") == "/logs/attempt_0/dumps/torch");
  CHECK(e->at("TORCH_FR_BUFFER_SIZE") == "2000");
  CHECK(e->at("TORCH_FR_DUMP_TEMP_FILE") == "/logs/attempt_0/dumps/torch/nccl_trace_rank_");
  CHECK(e->at("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == "/logs/attempt_0/dumps/torch/pipe_");
  CHECK(e->at("NCCL_RAS_ADDR") == "127.0.0.1:41000");
  // What the user set stays theirs.
  auto own = WorkerEnviron(g, 0, files,
                           {{"TORCH_FR_BUFFER_SIZE", "50"}, {"NCCL_RAS_ADDR", "10.1.1.1:28028"}});
  REQUIRE(own.ok());
  CHECK(own->at("TORCH_FR_BUFFER_SIZE") == "50");
  CHECK(own->at("NCCL_RAS_ADDR") == "10.1.1.1:28028");
  CHECK(own->at("PYTHONPATH") == "/run/torch_hook");
  // Off by default: nothing of the hook.
  auto off = WorkerEnviron(Group(), 0, files, {});
  REQUIRE(off.ok());
  CHECK(off->count("PYTHONPATH") == 0);
  CHECK(off->count("TORCH_FR_BUFFER_SIZE") == 0);
  CHECK(off->count("NCCL_RAS_ADDR") == 0);
}

}  // namespace
}  // namespace ddprun::env
