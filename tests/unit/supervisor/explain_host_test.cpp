// The explanations of what the host limits or the system did to a worker:
// file size and address-space limits, core dumps, a shell's 128+N, a Gloo
// peer at a loopback address (supervisor/explain_host.cpp).
#include <doctest/doctest.h>
#include <net/if.h>
#include <sys/socket.h>

#include <csignal>

#include "supervisor/explain.hpp"
#include "tests/unit/supervisor/explain_test_util.hpp"

namespace ddprun::supervisor {
namespace {

using explain_test::Context;
using explain_test::Failed;

TEST_CASE("explain: a native crash that left a core file says how to open it") {
  ExplainContext c = Context("/usr/bin/python3", "PATH");
  c.unasked_signal = SIGSEGV;
  FailureRecord f = Failed("Signal 11 (SIGSEGV) received by PID 7");
  auto without = Explain(f, c);
  REQUIRE(without.has_value());
  CHECK(without->fix.find("ulimit -c unlimited keeps a core dump") != std::string::npos);
  f.core = "/work/run/core.7 (8.3 MiB)";
  auto with = Explain(f, c);
  REQUIRE(with.has_value());
  CHECK(with->fix.find("gdb /usr/bin/python3 /work/run/core.7, then bt, shows the stack") !=
        std::string::npos);
  f.core = "piped to systemd-coredump: coredumpctl gdb 7 (coredumpctl list)";
  CHECK(Explain(f, c)->fix.find("open its core dump (above) in gdb") != std::string::npos);
}

// Attack 75: under a hard core-file limit of 0 the fix still said "ulimit -c unlimited".
TEST_CASE("explain: a native crash without a core file says what the core-file limit allows") {
  ExplainContext c = Context("/usr/bin/python3", "PATH");
  c.unasked_signal = SIGSEGV;
  const FailureRecord f = Failed("Signal 11 (SIGSEGV) received by PID 7");
  env::LimitFacts limits;
  limits.user = "alice";
  limits.core = {0, 0};
  c.limits = limits;
  std::string fix = Explain(f, c)->fix;
  CHECK(fix.find("no core dump can be kept: the hard core-file limit is 0 (ulimit -Hc") !=
        std::string::npos);
  CHECK(fix.find("'alice hard core unlimited'") != std::string::npos);
  CHECK(fix.find("ulimit -c unlimited") == std::string::npos);
  c.limits->core = {0, 1048576};
  CHECK(Explain(f, c)->fix.find("ulimit -c 1048576 keeps a core dump") != std::string::npos);
  c.limits->core = {env::kUnlimited, env::kUnlimited};
  fix = Explain(f, c)->fix;
  CHECK(fix.find("core dumps are allowed (ulimit -c unlimited) but none was found: "
                 "/proc/sys/kernel/core_pattern") != std::string::npos);
}

// gloo/transport/tcp as PyTorch 2.12 wraps it, from two network namespaces whose host names
// map to 127.0.1.1 (tests/e2e/test_two_hosts.py).
TEST_CASE("explain: a Gloo peer at a loopback address names the host name and the fix") {
  ExplainContext c;
  c.multi_node = true;
  c.interfaces = {{"lo", IFF_UP | IFF_RUNNING | IFF_LOOPBACK, {{AF_INET, "127.0.0.1"}}},
                  {"eth7", IFF_UP | IFF_RUNNING, {{AF_INET, "10.77.0.2"}}}};
  auto e = Explain(Failed("RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/"
                          "gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: "
                          "Connection refused, remote=[127.0.1.1]:4511"),
                   c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "Gloo peer at loopback");
  CHECK(e->cause.rfind("a rank's Gloo could not connect to a peer at 127.0.1.1, a loopback "
                       "address: with GLOO_SOCKET_IFNAME unset",
                       0) == 0);
  CHECK(e->fix.find("; here: eth7;") != std::string::npos);
  auto older = Explain(Failed("connect [127.0.1.1]:33421: Connection refused"), c);
  REQUIRE(older.has_value());
  CHECK(older->signature == "Gloo peer at loopback");
  CHECK_FALSE(Explain(Failed("remote=[10.77.0.1]:4511: Connection refused"), c).has_value());
  c.multi_node = false;  // one node: loopback reaches every peer, so that is not it
  CHECK_FALSE(Explain(Failed("connect [127.0.1.1]:33421: Connection refused"), c).has_value());
}

TEST_CASE("explain: a shell worker's 128+N is a command of it dead of signal N") {
  ExplainContext c;
  c.unasked_signal = SIGSEGV;
  c.signal_via_shell = true;
  auto crash = Explain(Failed("exitcode 139"), c);
  REQUIRE(crash.has_value());
  CHECK(crash->signature == "native crash");
  CHECK(crash->cause ==
        "the worker, a shell, exited 139 = 128 + SIGSEGV: a command it ran died "
        "of that signal; the worker crashed in native code (SIGSEGV)");
  c.unasked_signal = SIGTERM;  // nothing explains a SIGTERM: the code alone is said
  auto term = Explain(Failed("exitcode 143"), c);
  REQUIRE(term.has_value());
  CHECK(term->signature == "signal through a shell");
  CHECK(term->cause ==
        "the worker, a shell, exited 143 = 128 + SIGTERM: a command it ran died of that signal");
  CHECK(term->fix.find("exec") != std::string::npos);
  c.signal_via_shell = false;  // a program's own exit code 143 is its own business
  CHECK_FALSE(Explain(Failed("exitcode 143"), c).has_value());
}

ExplainContext WithLimits(env::Rlimit fsize, env::Rlimit address_space) {
  ExplainContext c;
  env::LimitFacts f;
  f.user = "alice";
  f.fsize = fsize;
  f.address_space = address_space;
  c.limits = f;
  return c;
}

TEST_CASE("explain: a write past the file size limit, said by Python or a SIGXFSZ death") {
  const ExplainContext c = WithLimits({64 << 10, 64 << 10}, {});
  auto said = Explain(Failed("OSError: [Errno 27] File too large"), c);
  REQUIRE(said.has_value());
  CHECK(said->signature == "file too large");
  CHECK(said->cause ==
        "a worker's write went past the file size limit (RLIMIT_FSIZE, ulimit -f: soft 64.0 "
        "KiB, hard 64.0 KiB)");
  CHECK(said->fix.find("ulimit -Hf unlimited") != std::string::npos);
  CHECK(said->fix.find("\"alice hard fsize unlimited\"") != std::string::npos);

  ExplainContext signalled = c;
  signalled.unasked_signal = SIGXFSZ;
  auto died = Explain(Failed("exitcode -25"), signalled);
  REQUIRE(died.has_value());
  CHECK(died->cause.rfind("the worker died of SIGXFSZ: a write of it went past the file size "
                          "limit",
                          0) == 0);

  // No limit set: the filesystem's own largest file.
  auto fs = Explain(Failed("OSError: [Errno 27] File too large"), WithLimits({}, {}));
  REQUIRE(fs.has_value());
  CHECK(fs->cause.find("the largest file its filesystem holds") != std::string::npos);
  CHECK(fs->fix.find("another filesystem") != std::string::npos);
}

TEST_CASE("explain: too many open files names the open-file limit, or the system's table") {
  ExplainContext c = WithLimits({}, {});
  c.limits->nofile = {100, 100};
  auto e = Explain(Failed("OSError: [Errno 24] Too many open files: '/data/shard_97'"), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "too many open files");
  CHECK(e->cause ==
        "a worker opened more files than its open-file limit allows (EMFILE, RLIMIT_NOFILE: soft "
        "100, hard 100; ddprun raises the workers' soft limit to the hard one)");
  CHECK(e->fix.find("\"alice hard nofile N\"") != std::string::npos);
  auto system = Explain(Failed("OSError: [Errno 23] Too many open files in system"), c);
  REQUIRE(system.has_value());
  CHECK(system->cause.find("the system's table of open files full (ENFILE") != std::string::npos);
}

// PyTorch 2.12's torch.save under ulimit -f 64: the short write surfaces at the end.
TEST_CASE("explain: a checkpoint torch.save cut short names the file size limit or the space") {
  const std::string text =
      "    self.file_like.write_end_of_file()\nRuntimeError: [enforce fail at "
      "inline_container.cc:672] . unexpected pos 704 vs 598";
  auto limited = Explain(Failed(text), WithLimits({64 << 10, 64 << 10}, {}));
  REQUIRE(limited.has_value());
  CHECK(limited->signature == "checkpoint cut short");
  CHECK(limited->cause.find("torch.save wrote less than the whole file") != std::string::npos);
  CHECK(limited->cause.find("the file size limit (RLIMIT_FSIZE, ulimit -f: soft 64.0 KiB, hard "
                            "64.0 KiB) or a full filesystem") != std::string::npos);
  auto unlimited = Explain(Failed("RuntimeError: PytorchStreamWriter failed writing file data/3: "
                                  "file write failed"),
                           WithLimits({}, {}));
  REQUIRE(unlimited.has_value());
  CHECK(unlimited->cause.find("its filesystem was full or over quota") != std::string::npos);
  CHECK(unlimited->fix.find("df -h") != std::string::npos);
}

TEST_CASE("explain: memory refused under an address-space cap names RLIMIT_AS") {
  const ExplainContext c = WithLimits({}, {2048ull << 20, 2048ull << 20});
  // The DDP core's own words for a thread it could not start under a cap.
  const char* const gloo =
      "train: rank 0: ddp: gloo set-up (rank 0 of 2, local address 127.0.0.1): Resource "
      "temporarily unavailable (a thread could not be started: RLIMIT_AS (ulimit -v) is 48.8 "
      "MiB, each thread's stack 8.0 MiB of it (ulimit -s): raise or lift ulimit -v)";
  for (const char* text :
       {"ImportError: libtorch_cpu.so: failed to map segment from shared object", "MemoryError",
        "terminate called after throwing an instance of 'std::bad_alloc'",
        "RuntimeError: can't start new thread", gloo}) {
    auto e = Explain(Failed(text), c);
    REQUIRE(e.has_value());
    CHECK(e->signature == "address space limit");
    CHECK(e->cause.find("under a cap on its address space: RLIMIT_AS (ulimit -v), soft 2.0 GiB, "
                        "hard 2.0 GiB") != std::string::npos);
    CHECK(e->fix.find("ulimit -Hv unlimited") != std::string::npos);
  }
  // A roomy cap (16 GiB) where the user's thread limit holds: that limit, with the cap said as
  // the other possibility (found by an attacking helper: ulimit -Hv unlimited was the fix given).
  ExplainContext roomy = WithLimits({}, {16ull << 30, 16ull << 30});
  roomy.limits->uid = 65534;
  roomy.limits->nproc = {60, 60};
  auto nproc = Explain(Failed("RuntimeError: can't start new thread"), roomy);
  REQUIRE(nproc.has_value());
  CHECK(nproc->signature == "thread limit");
  CHECK(nproc->cause.find("RLIMIT_NPROC of alice is soft 60, hard 60") != std::string::npos);
  CHECK(nproc->cause.find("(or RLIMIT_AS, ulimit -v, soft 16.0 GiB, hard 16.0 GiB, left no room "
                          "for the thread's stack)") != std::string::npos);
  // A DataLoader worker (a child) could not start a thread; the rank says only that it died.
  auto child = Explain(Failed("RuntimeError: DataLoader worker (pid(s) 4242) exited "
                              "unexpectedly",
                              "Traceback (most recent call last):\n  File \"w.py\", line 3\n"
                              "RuntimeError: can't start new thread\nTraceback (most recent call "
                              "last):\nRuntimeError: DataLoader worker (pid(s) 4242) exited "
                              "unexpectedly\n"),
                       roomy);
  REQUIRE(child.has_value());
  CHECK(child->signature == "thread limit");
  // Without a cap the same words are not blamed on one.
  auto threads = Explain(Failed("RuntimeError: can't start new thread"), WithLimits({}, {}));
  REQUIRE(threads.has_value());
  CHECK(threads->signature == "thread limit");
  CHECK_FALSE(Explain(Failed("MemoryError"), WithLimits({}, {})).has_value());
  // A GPU's own out-of-memory report is the GPU's, cap or not.
  auto gpu = Explain(Failed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                            "GiB. GPU 0 has a total capacity of 79.1 GiB of which 1.2 GiB is "
                            "free."),
                     c);
  REQUIRE(gpu.has_value());
  CHECK(gpu->signature == "CUDA out of memory");
}

TEST_CASE("explain: an abort at exit while every peer still ran says the rank left first") {
  ExplainContext c = Context("/usr/bin/python3", "PATH");
  c.unasked_signal = SIGABRT;
  const FailureRecord f = Failed("Signal 6 (SIGABRT) received by PID 7",
                                 "rank 1 done\nterminate called without an active exception\n");
  auto alone = Explain(f, c);  // its peers had ended too: nothing says it left first
  REQUIRE(alone.has_value());
  CHECK(alone->cause == "the worker crashed in native code (SIGABRT)");
  c.peers_running = true;
  auto first = Explain(f, c);
  REQUIRE(first.has_value());
  CHECK(first->cause.find("the worker aborted (SIGABRT) as it exited (\"terminate called without "
                          "an active exception\"") == 0);
  CHECK(first->cause.find("it left the job first") != std::string::npos);
  CHECK(first->fix.find("destroy_process_group()") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::supervisor
