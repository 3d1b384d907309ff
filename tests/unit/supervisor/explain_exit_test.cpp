// The explanations of how a worker ended when that is the news: hung at its
// exit, killed by the OOM killer, crashed (in native code, on an uncaught C++
// exception, under a small stack limit, on its way out after it finished).
#include <doctest/doctest.h>

#include <csignal>

#include "supervisor/explain.hpp"
#include "tests/unit/supervisor/explain_test_util.hpp"

namespace ddprun::supervisor {
namespace {

using explain_test::Failed;

TEST_CASE("explain: a worker hung at exit is told apart from what its output says") {
  auto e = Explain(Failed("hung at exit: removed its heartbeat file 5.0 s ago and has not exited "
                          "(--exit_timeout=5)",
                          "RuntimeError: CUDA out of memory\n"),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "hung at exit");
  CHECK(e->cause.find("program had finished") != std::string::npos);
  CHECK(e->fix.find("destroy_process_group") != std::string::npos);
  CHECK(e->fix.find("not restarted") != std::string::npos);
  CHECK_FALSE(Explain(Failed("hung: no heartbeat for 5.0 s (--hang_timeout=5)"), {}));
  // PyTorch's warnings of a group never destroyed (2.4, then 2.7 on) name the cause.
  for (const char* warning :
       {"[rank1]:[W227 10:54:51.986111855 ProcessGroupNCCL.cpp:1374] Warning: WARNING: process "
        "group has NOT been destroyed before we destruct ProcessGroupNCCL. On normal program "
        "exit, the application should call destroy_process_group",
        "[rank1]:[W730 15:32:14.298860965 ProcessGroupNCCL.cpp:1479] Warning: WARNING: "
        "destroy_process_group() was not called before program exit, which can leak "
        "resources."}) {
    e = Explain(Failed("hung at exit: removed its heartbeat file 5.0 s ago", warning), {});
    REQUIRE(e.has_value());
    CHECK(e->signature == "hung at exit");
    CHECK(e->cause.find("never destroyed its process group") != std::string::npos);
  }
}

// torch/csrc/distributed/c10d/socket.cpp, SocketListenOp's failure.

TEST_CASE("explain: a SIGKILL nobody in the job sent, while the OOM killer killed, is named") {
  env::MemoryFacts m;
  m.host_oom_kills = 1;
  m.cgroup = "/sys/fs/cgroup/memory/job";
  m.cgroup_oom_kills = 1;
  m.cgroup_limit = 256ull << 20;
  m.cgroup_peak = 255ull << 20;
  m.mem_total = 24ull << 30;
  m.mem_available = 20ull << 30;
  ExplainContext c;
  c.memory = m;
  CHECK_FALSE(Explain(Failed("Signal 9 (SIGKILL)"), c).has_value());  // not a kill of the worker
  c.unasked_signal = SIGKILL;
  auto e = Explain(Failed("Signal 9 (SIGKILL)"), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "out of memory (OOM killer)");
  CHECK(e->cause ==
        "the worker died of SIGKILL, which ddprun did not send, and the kernel's OOM killer "
        "killed 1 process(es) of the job's memory cgroup meanwhile; the memory cgroup "
        "/sys/fs/cgroup/memory/job has a limit of 256.0 MiB (peak use 255.0 MiB); the host has "
        "24.0 GiB, 20.0 GiB available now");
  CHECK(e->fix.find("DataLoader num_workers") != std::string::npos);
  m.cgroup_oom_kills = 0;
  m.cgroup_limit.reset();
  c.memory = m;
  c.unasked_signal = 0;  // the worker raised; its DataLoader worker was killed
  e = Explain(Failed("RuntimeError: DataLoader worker (pid 77) is killed by signal: Killed."), c);
  REQUIRE(e.has_value());
  CHECK(e->cause.rfind("a DataLoader worker of it died and the kernel's OOM killer killed 1 "
                       "process(es) on this host meanwhile (/proc/vmstat); the host has",
                       0) == 0);
  e = Explain(Failed("RuntimeError: DataLoader worker (pid(s) 77, 78) exited unexpectedly"), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "out of memory (OOM killer)");
  m.host_oom_kills = 0;  // a SIGKILL without OOM kills: someone else's, no guess
  c.memory = m;
  c.unasked_signal = SIGKILL;
  CHECK_FALSE(Explain(Failed(""), c).has_value());
}

TEST_CASE("explain: a SIGSEGV under a stack limit below 8 MiB names the limit") {
  // Attack 80: ulimit -s 64 (hard) crashed import torch; the report blamed an extension.
  ExplainContext c;
  c.unasked_signal = SIGSEGV;
  c.limits.emplace();
  c.limits->user = "alice";
  c.limits->stack = {64 << 10, 64 << 10};
  auto e = Explain(Failed("Signal 11 (SIGSEGV) received by PID 9"), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "native crash");
  CHECK(e->cause ==
        "the worker crashed in native code (SIGSEGV); its stack limit is only 64.0 KiB "
        "(RLIMIT_STACK, ulimit -s: soft 64.0 KiB, hard 64.0 KiB), under the usual 8 MiB: a deep "
        "native call overflows it");
  CHECK(e->fix.find("'alice hard stack 8192' in /etc/security/limits.d/") != std::string::npos);
  c.limits->stack = {8 << 20, env::kUnlimited};
  CHECK(Explain(Failed("Signal 11 (SIGSEGV) received by PID 9"), c)->cause ==
        "the worker crashed in native code (SIGSEGV)");
}

// CPython 3.11's faulthandler and libstdc++'s terminate handler, as they print.

TEST_CASE("explain: a crash after the worker removed its heartbeat file is a crash at exit") {
  ExplainContext c;
  c.unasked_signal = SIGABRT;
  auto failed = Failed("Signal 6 (SIGABRT) received by PID 9",
                       "rank 1 done\nterminate called without an active exception\n");
  failed.crashed_at_exit_after = 0.4;
  auto e = Explain(failed, c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "crashed at exit");
  CHECK(e->cause ==
        "the worker's program had finished (it removed its heartbeat file 0.4 s before) and its "
        "process died of SIGABRT on its way out, in native teardown (a destructor, or a thread "
        "still running as the process ended): \"terminate called without an active exception\"");
  CHECK(e->fix.rfind("the job is not restarted (that would run the finished program again); ", 0) ==
        0);
  // What the crash says comes after: an uncaught C++ exception.
  failed = Failed("",
                  "terminate called after throwing an instance of 'std::runtime_error'\n"
                  "  what():  teardown failed\n");
  failed.crashed_at_exit_after = 0.01;
  e = Explain(failed, c);
  REQUIRE(e.has_value());
  CHECK(e->cause.find("heartbeat file just before)") != std::string::npos);
  CHECK(e->cause.find("; the worker aborted (SIGABRT) on a C++ exception nothing caught: "
                      "std::runtime_error: teardown failed") != std::string::npos);
  // Before it finished, or stopped by ddprun: not at exit.
  failed.crashed_at_exit_after = -1;
  CHECK(Explain(failed, c)->signature == "native crash");
  failed.crashed_at_exit_after = 2;
  c.unasked_signal = 0;
  CHECK_FALSE(Explain(failed, c).has_value());
}

TEST_CASE("explain: a native crash names the Python call under it, or the C++ exception") {
  const std::string faulthandler =
      "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f27aeaa0b80 (most recent "
      "call first):\n  File \"/usr/lib/python3.11/ctypes/__init__.py\", line 519 in string_at\n"
      "  File \"/tmp/job/segv.py\", line 3 in crash\n  File \"/tmp/job/segv.py\", line 4 in "
      "<module>\n";
  ExplainContext c;
  CHECK_FALSE(Explain(Failed("", faulthandler), c).has_value());  // exited, or ddprun's signal
  c.unasked_signal = SIGSEGV;
  auto e = Explain(Failed("Signal 11 (SIGSEGV) received by PID 9", faulthandler), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "native crash");
  CHECK(e->cause ==
        "the worker crashed in native code (SIGSEGV) under the Python call string_at "
        "(/usr/lib/python3.11/ctypes/__init__.py, line 519), called from crash (/tmp/job/segv.py, "
        "line 3)");
  CHECK(e->fix.find("PYTHONFAULTHANDLER") == std::string::npos);  // it printed already
  e = Explain(Failed("Signal 11 (SIGSEGV) received by PID 9"), c);
  REQUIRE(e.has_value());
  CHECK(e->cause == "the worker crashed in native code (SIGSEGV)");
  CHECK(e->fix.rfind("PYTHONFAULTHANDLER=1 prints each worker's Python stack", 0) == 0);
  c.unasked_signal = SIGABRT;
  e = Explain(Failed("",
                     "terminate called after throwing an instance of 'std::runtime_error'\n"
                     "  what():  NCCL communicator was aborted\n"),
              c);
  REQUIRE(e.has_value());
  CHECK(e->cause ==
        "the worker aborted (SIGABRT) on a C++ exception nothing caught: std::runtime_error: "
        "NCCL communicator was aborted");
  // ProcessGroupNCCL's watchdog terminates the same way; its own entry says more.
  e = Explain(Failed("",
                     "terminate called after throwing an instance of 'c10::DistBackendError'\n"
                     "  what():  [Rank 1] Watchdog caught collective operation timeout: "
                     "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                     "Timeout(ms)=600000) ran for 600071 milliseconds before timing out.\n"),
              c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "collective timeout");
  // A Python exception, then an abort as the interpreter exits (Gloo's teardown
  // with its peer gone): the exception is the failure, not native code.
  const std::string traceback =
      "Traceback (most recent call last):\n  File \"/tmp/job/rt.py\", line 9, in main\n    "
      "raise RuntimeError(\"boom on rank 1\")\nRuntimeError: boom on rank 1\n";
  for (const std::string& prefix : {std::string(), std::string("[rank1]: ")}) {
    std::string tail;
    for (size_t at = 0; at < traceback.size();) {
      const size_t nl = traceback.find('\n', at);
      tail += prefix + traceback.substr(at, nl + 1 - at);
      at = nl + 1;
    }
    e = Explain(Failed("", tail), c);
    REQUIRE(e.has_value());
    CHECK(e->signature == "native crash");
    CHECK(e->cause ==
          "the worker raised RuntimeError: boom on rank 1, then aborted (SIGABRT) on its way out, "
          "in native teardown (a process group left to be torn down while its peers were gone): "
          "the exception is the failure");
  }
  e = Explain(Failed(traceback), c);  // the error file's traceback
  REQUIRE(e.has_value());
  CHECK(e->cause.rfind("the worker raised RuntimeError: boom on rank 1, then aborted", 0) == 0);
  c.unasked_signal = SIGSEGV;  // a crash is no way out: native code it stays
  CHECK(Explain(Failed(traceback), c)->cause == "the worker crashed in native code (SIGSEGV)");
  c.unasked_signal = SIGBUS;
  c.shm_size_bytes = 64ull << 20;
  e = Explain(Failed(""), c);
  REQUIRE(e.has_value());
  CHECK(e->cause ==
        "the worker crashed in native code (SIGBUS); a SIGBUS is often a mapped file or /dev/shm "
        "that ran out of space (/dev/shm is 64.0 MiB)");
  c.unasked_signal = SIGTERM;
  CHECK_FALSE(Explain(Failed(""), c).has_value());
}

// As torch 2.12 raises them from DistributedDataParallel's constructor.

}  // namespace
}  // namespace ddprun::supervisor
