#include "supervisor/debug_dump.hpp"
#include "supervisor/python_stacks.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "env/processes.hpp"

extern char** environ;

namespace ddprun::supervisor {
namespace {

using Clock = std::chrono::system_clock;
using std::chrono::milliseconds;

bool Has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("ddprun_dump_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A shell blocked reading its stdin (a pipe nobody writes), SIGKILLed and
// reaped on destruction. The constructor returns once the shell has printed
// "ready": its program is loaded and running, so a stack tool can walk it.
class Sleeper {
 public:
  Sleeper() {
    int in[2], out[2];
    REQUIRE(pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    stdin_write_ = in[1];
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"),
                    const_cast<char*>("echo ready; read x"), nullptr};
    const int rc = posix_spawnp(&pid_, "sh", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    REQUIRE(rc == 0);
    char ready[6] = {};
    CHECK(read(out[0], ready, sizeof(ready)) == 6);  // blocks until "ready\n"
    close(out[0]);
  }
  ~Sleeper() {
    kill(pid_, SIGKILL);
    close(stdin_write_);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  int stdin_write_ = -1;
};

// A trace file in the documented layout (docs/flight-recorder.md §2), written
// without the DDP core: the supervisor must be able to read any writer's file.
void WriteTrace(const std::string& path, int rank, const std::vector<env::TraceEntry>& entries) {
  const uint32_t capacity = 8;
  std::vector<char> file(env::TraceFileSize(capacity), 0);
  env::TraceFileHeader h{};
  std::memcpy(h.magic, env::kTraceMagic, sizeof(h.magic));
  h.version = env::kTraceVersion;
  h.rank = rank;
  h.capacity = capacity;
  h.entry_size = sizeof(env::TraceEntry);
  std::memcpy(file.data(), &h, sizeof(h));
  for (const env::TraceEntry& e : entries) {
    std::memcpy(file.data() + sizeof(h) + (e.seq % capacity) * sizeof(e), &e, sizeof(e));
  }
  std::ofstream(path, std::ios::binary)
      .write(file.data(), static_cast<std::streamsize>(file.size()));
}

env::TraceEntry Entry(uint64_t seq, env::OpState state) {
  env::TraceEntry e;
  e.seq = seq;
  std::strcpy(e.op, "allreduce");
  e.bytes = 1 << 20;
  e.state = static_cast<uint32_t>(state);
  e.enqueued_ns = e.started_ns = 1;
  if (state == env::OpState::kCompleted) e.completed_ns = 2;
  return e;
}

TEST_CASE("RunTool captures stdout and stderr and the exit code") {
  ToolResult r = RunTool({"sh", "-c", "echo out; echo err >&2; exit 3"}, milliseconds(5000));
  CHECK(r.error.empty());
  CHECK(r.output == "out\nerr\n");
  CHECK(r.exit_code == 3);
  CHECK_FALSE(r.timed_out);
}

TEST_CASE("RunTool kills a tool at its deadline") {
  const auto start = std::chrono::steady_clock::now();
  ToolResult r = RunTool({"sh", "-c", "echo started; exec sleep 30"}, milliseconds(300));
  CHECK(r.timed_out);
  CHECK(r.output == "started\n");
  CHECK(r.exit_code == -1);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
}

TEST_CASE("RunTool reports a program that is not on PATH") {
  ToolResult r = RunTool({"ddprun-no-such-tool"}, milliseconds(1000));
  CHECK(r.error == "ddprun-no-such-tool: not found on PATH");
  CHECK(FindOnPath("ddprun-no-such-tool").empty());
  CHECK(FindOnPath("sh").find("/sh") != std::string::npos);
}

TEST_CASE("MainThreadStack takes the main thread's frames from eu-stack and gdb output") {
  const std::string eu =
      "PID 42 - process\nTID 43:\n#0  0x1 futex_wait\nTID 42:\n#0  0x2 poll\n#1  0x3 main\n"
      "TID 44:\n#0  0x4 other\n";
  CHECK(MainThreadStack(eu, 42, 15) == "#0  0x2 poll\n#1  0x3 main\n");
  CHECK(MainThreadStack(eu, 42, 1) == "#0  0x2 poll\n");
  const std::string gdb =
      "Thread 2 (Thread 0x7f (LWP 43) \"w\"):\n#0  futex\n\n"
      "Thread 1 (Thread 0x7e (LWP 42) \"main\"):\n#0  poll ()\n#1  main ()\n\n";
  CHECK(MainThreadStack(gdb, 42, 15) == "#0  poll ()\n#1  main ()\n");
  CHECK(MainThreadStack(eu, 7, 15).empty());
}

RankDump FakeDump(int rank, pid_t pid) {
  RankDump d;
  d.target = DumpTarget{rank, rank, pid, "/tmp/trace.bin"};
  d.native_tool = "eu-stack";
  d.native.exit_code = 0;
  d.native.output = "PID " + std::to_string(pid) + " - process\nTID " + std::to_string(pid) +
                    ":\n#0  0x1 nanosleep\n#1  0x2 main\n";
  d.python.error = "no Python stacks: py-spy is not installed (pip install py-spy)";
  d.proc_state = "State:\tS (sleeping)\nThreads:\t1\n";
  d.trace = {Entry(0, env::OpState::kCompleted), Entry(1, env::OpState::kStarted)};
  return d;
}

TEST_CASE("the rank file has the /proc state, both stacks and the flight recorder") {
  RankDump d = FakeDump(1, 4242);
  d.native.timed_out = true;
  const std::string text = FormatRankDump(d, 1, Clock::now());
  CHECK(Has(text, "rank 1 (local rank 1, pid 4242)"));
  CHECK(Has(text, "== /proc/4242 ==\nState:\tS (sleeping)\nThreads:\t1\n"));
  CHECK(Has(text, "== native stacks (eu-stack) ==\nPID 4242"));
  CHECK(Has(text, "[eu-stack did not finish in time: killed, the output above is partial]"));
  CHECK(Has(text, "py-spy is not installed"));
  CHECK(Has(text, "== flight recorder (/tmp/trace.bin) ==\nlast 1 of 2 entries:\n  #1 "));
  d.trace_error = kNoFlightRecorder;
  CHECK(Has(FormatRankDump(d, 20, Clock::now()), kNoFlightRecorder));
}

TEST_CASE("the summary names hung and beating ranks, the verdict and the main stacks") {
  const Clock::time_point now = Clock::now();
  DumpRequest request;
  request.dir = "/tmp/dumps";
  request.hung = {{1, now - std::chrono::seconds(15)}};
  request.beating = {0};
  std::vector<RankDump> dumps = {FakeDump(0, 100), FakeDump(1, 101)};
  dumps[1].trace = {Entry(0, env::OpState::kCompleted)};
  TraceAnalysis analysis = AnalyzeTraces({{0, dumps[0].trace}, {1, dumps[1].trace}}, {}, now);
  const std::string s = FormatSummary(request, dumps, analysis, now);
  CHECK(Has(s, "2 workers, in /tmp/dumps\n"));
  CHECK(Has(s, "hung ranks: 1\n  rank 1: silent since "));
  CHECK(Has(s, " (15.0 s)\n"));
  request.hung[0].counted_seconds = 3;  // the rest of the 15 s was a pause (a stalled console)
  CHECK(Has(FormatSummary(request, dumps, analysis, now),
            " (15.0 s, 3.0 s of it counted: the rest was paused)\n"));
  // Found hung after 6 s all counted; the dump then took 9 s: no pause to claim.
  request.hung[0].counted_seconds = 6;
  request.hung[0].observed = now - std::chrono::seconds(9);
  CHECK(Has(FormatSummary(request, dumps, analysis, now), " (15.0 s)\n"));
  request.hung[0].observed = {};
  request.hung[0].counted_seconds = -1;
  CHECK(Has(s, "ranks still beating: 0\n"));
  CHECK(
      Has(s, "rank 0 waits in allreduce #1 (1.0 MiB); rank 1 completed #0 and has not entered #1"));
  CHECK(Has(s, "rank 1 (pid 101), rank_1.txt:\n  #0  0x1 nanosleep\n  #1  0x2 main\n"));
  request.hung[0].at_exit = true;  // finishing, and never exited
  CHECK(Has(FormatSummary(request, dumps, analysis, now),
            "hung ranks: 1\n  rank 1: hung at exit, finishing (heartbeat file removed) since "));
}

TEST_CASE("a dump whose directory cannot be written still gives its summary, saying why") {
  // Found by an attacking helper: on a full disk the whole dump was lost, summary and all.
  Sleeper s0;
  DumpRequest request;
  request.dir = "/proc/self/no-such-dir/dumps";
  request.targets.push_back(DumpTarget{0, 0, s0.pid(), ""});
  request.hung = {{0, Clock::now()}};
  request.tool_timeout = std::chrono::seconds(2);
  auto dump = WriteDebugDump(request);
  REQUIRE(dump.ok());
  CHECK(Has(dump->not_kept, "create /proc/self/no-such-dir/dumps: "));
  CHECK(Has(dump->summary, "hung ranks: 0\n"));
}

TEST_CASE("a dump of live processes holds their threads, /proc state and flight recorders") {
  if (FindOnPath("eu-stack").empty() && FindOnPath("gdb").empty()) {
    MESSAGE("skipped: neither eu-stack nor gdb is installed");
    return;
  }
  const std::string dir = TempDir("live");
  std::filesystem::create_directories(dir);
  Sleeper s0, s1, s2, s3;
  const std::vector<pid_t> pids = {s0.pid(), s1.pid(), s2.pid(), s3.pid()};
  DumpRequest request;
  request.dir = dir + "/dumps";
  for (int r = 0; r < 4; ++r) {
    const std::string trace = dir + "/trace_" + std::to_string(r) + ".bin";
    if (r != 2) {
      std::vector<env::TraceEntry> entries = {Entry(0, env::OpState::kCompleted)};
      if (r != 1) entries.push_back(Entry(1, env::OpState::kStarted));
      WriteTrace(trace, r, entries);
    }
    request.targets.push_back(DumpTarget{r, r, pids[r], trace});
  }
  request.hung = {{1, Clock::now()}};
  request.beating = {0, 2, 3};
  REQUIRE(kill(s3.pid(), SIGSTOP) == 0);  // stopped as the dump begins, and left stopped
  while (env::StoppedState(s3.pid()) == 0) usleep(1000);

  // How long a dump takes (goal: 3 s for 8 ranks) is bench/hang_bench.py's "dump" row.
  auto summary = WriteDebugDump(request);
  REQUIRE_MESSAGE(summary.ok(), summary.status().message());
  for (int r = 0; r < 4; ++r) {
    const std::string text = Slurp(request.dir + "/rank_" + std::to_string(r) + ".txt");
    const std::string pid = std::to_string(pids[r]);
    // The state itself is S once the shell is in read(2), R for a moment before.
    CHECK(Has(text, "State:\t"));
    CHECK(Has(text, "Threads:\t1\n"));
    CHECK(Has(text, "threads (tid name state wchan):\n  " + pid + " sh "));
    CHECK_MESSAGE((Has(text, "TID " + pid + ":") || Has(text, "(LWP " + pid + ")")), text);
  }
  CHECK(Has(Slurp(request.dir + "/rank_2.txt"), kNoFlightRecorder));
  CHECK(Slurp(request.dir + "/summary.txt") == summary->summary);
  CHECK(
      Has(summary->summary,
          "ranks 0,3 wait in allreduce #1 (1.0 MiB); rank 1 completed #0 and has not entered #1"));
  CHECK(Has(summary->summary, "rank 2: " + std::string(kNoFlightRecorder)));
  CHECK(Has(summary->summary, "rank 1 (pid " + std::to_string(pids[1]) + "), rank_1.txt:\n  #0 "));
  CHECK(Has(summary->summary, "ranks still beating: 0,2\nrank 3 (pid " + std::to_string(pids[3]) +
                                  ") was stopped by a signal (SIGSTOP) as the dump began: the "
                                  "ranks in a collective with it wait for it (kill -CONT " +
                                  std::to_string(pids[3]) + " lets it run)\n\n"));
  CHECK_FALSE(Has(summary->summary, "rank 0 (pid " + std::to_string(pids[0]) + ") was stopped"));
  CHECK_FALSE(summary->all_waiting);          // rank 1 is behind: the cause is here
  CHECK(env::StoppedState(s3.pid()) == 'T');  // the tools detached and left it stopped
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::supervisor

namespace ddprun::supervisor {
namespace {

TEST_CASE("OtherPythonThreads takes the threads but the main one and the hook's") {
  const std::string py_spy =
      "Process 4863: python -u job.py\n"
      "Python v3.11.7 (/usr/bin/python3.11)\n"
      "\n"
      "Thread 4863 (idle): \"MainThread\"\n"
      "    _shutdown (threading.py:1590)\n"
      "Thread 4870 (idle): \"ddprun-torch-hook\"\n"
      "    _watch (sitecustomize.py:52)\n"
      "Thread 4900 (idle): \"keeper\"\n"
      "    sleep (job.py:3)\n"
      "    Thread.run (threading.py:982)\n"
      "    Thread._bootstrap (threading.py:1002)\n"
      "Thread 4901 (active): \"loader\"\n"
      "    fetch (job.py:9)\n"
      "\n"
      "its child processes (py-spy dump --subprocesses):\n"
      "Thread 5000 (idle): \"child\"\n"
      "    run (worker.py:1)\n";
  CHECK(OtherPythonThreads(py_spy, 4, 2) ==
        "python Thread 4900 \"keeper\":\nsleep (job.py:3)\nThread.run (threading.py:982)\n"
        "python Thread 4901 \"loader\":\nfetch (job.py:9)\n");
  CHECK(OtherPythonThreads(py_spy, 1, 1) ==
        "python Thread 4900 \"keeper\":\nsleep (job.py:3)\n"
        "and 1 more thread(s): see the rank file\n");
  CHECK(OtherPythonThreads("Thread 1 (idle): \"MainThread\"\n    main (a.py:1)\n", 4, 6).empty());
  // Attack 97: a name with blank lines in it hid the threads after it.
  const std::string odd =
      "Thread 2 (idle): \"evil\n\nname\"\n    wait (a.py:2)\n"
      "Thread 3 (idle): \"keeper2\"\n    sleep (a.py:3)\n";
  CHECK(OtherPythonThreads(odd, 4, 6) ==
        "python Thread 2 \"evil...\":\nwait (a.py:2)\npython Thread 3 \"keeper2\":\nsleep "
        "(a.py:3)\n");
  CHECK(OtherPythonThreads("", 4, 6).empty());
}

TEST_CASE("MainThreadPythonStack takes py-spy's MainThread frames") {
  const std::string py_spy =
      "Process 4863: python -u job.py\n"
      "Python v3.11.7 (/usr/bin/python3.11)\n"
      "\n"
      "Thread 4870 (idle): \"ddprun-torch-hook\"\n"
      "    _watch (sitecustomize.py:52)\n"
      "Thread 4863 (idle): \"MainThread\"\n"
      "    stuck (job.py:13)\n"
      "    main (job.py:37)\n"
      "    <module> (job.py:47)\n"
      "Thread 4900 (active): \"worker\"\n"
      "    run (threading.py:982)\n";
  CHECK(MainThreadPythonStack(py_spy, 15) ==
        "python Thread 4863 (idle):\nstuck (job.py:13)\nmain (job.py:37)\n<module> (job.py:47)\n");
  CHECK(MainThreadPythonStack(py_spy, 1) == "python Thread 4863 (idle):\nstuck (job.py:13)\n");
  CHECK(MainThreadPythonStack("Thread 1 (idle): \"MainThread\"\n    \n", 5) ==
        "python Thread 1 (idle):\n");
  CHECK(MainThreadPythonStack("", 15).empty());
  CHECK(MainThreadPythonStack("Error: Permission denied\n", 15).empty());
}

}  // namespace
}  // namespace ddprun::supervisor
