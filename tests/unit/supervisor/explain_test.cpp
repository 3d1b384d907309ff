#include "supervisor/explain.hpp"

#include <doctest/doctest.h>
#include <net/if.h>
#include <sys/socket.h>
#include <csignal>

#include "tests/unit/supervisor/explain_test_util.hpp"

namespace ddprun::supervisor {
namespace {

using explain_test::Context;
using explain_test::Failed;

TEST_CASE("explain: a module the workers' Python cannot import names it and the interpreter") {
  auto e = Explain(Failed("Traceback (most recent call last):\n  File \"t.py\", line 1\n"
                          "ModuleNotFoundError: No module named 'torch.distributed'"),
                   Context("/usr/bin/python3", "PATH"));
  REQUIRE(e.has_value());
  CHECK(e->signature == "module not found");
  CHECK(e->cause ==
        "the workers' Python cannot import torch.distributed: they ran /usr/bin/python3 (from "
        "PATH)");
  CHECK(e->fix.find("install torch into that Python's environment") != std::string::npos);
  CHECK(e->fix.find("PYTHON_EXEC") != std::string::npos);
}

TEST_CASE("explain: the output tail counts when there is no error file") {
  auto e = Explain(Failed("exitcode 1", "ModuleNotFoundError: No module named \"numpy\"\n"), {});
  REQUIRE(e.has_value());
  CHECK(e->cause == "the workers' Python cannot import numpy");
}

TEST_CASE("explain: no match, no explanation") {
  CHECK_FALSE(Explain(Failed("RuntimeError: boom"), {}).has_value());
  CHECK_FALSE(Explain(Failed("ModuleNotFoundError: No module named"), {}).has_value());
  CHECK_FALSE(Explain(Failed("ModuleNotFoundError: No module named ''"), {}).has_value());
}

// The message texts below are PyTorch's (torch 2.12.1), each from the file named above it.

// torch/csrc/distributed/c10d/reducer.cpp, Reducer::ensure_prior_reduction_finished.
constexpr char kUnused[] =
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting a "
    "new one. This error indicates that your module has parameters that were not used in "
    "producing loss. You can enable unused parameter detection by passing the keyword argument "
    "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, ...\n";

TEST_CASE("explain: unused parameters are named by their indices, and names when printed") {
  auto e = Explain(
      Failed(std::string(kUnused) + "Parameter indices which did not receive grad for rank 1: 2 3"),
      {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "unused parameters");
  CHECK(e->cause ==
        "DDP got no gradient for parameters with indices 2 3 on rank 1 in the previous iteration: "
        "they took no part in producing the loss");
  CHECK(e->fix.find("find_unused_parameters=True") != std::string::npos);
  CHECK(e->fix.find("TORCH_DISTRIBUTED_DEBUG=INFO") != std::string::npos);
  e = Explain(
      Failed(std::string(kUnused) +
             "Parameters which did not receive grad for rank 0: unused.bias, unused.weight\n"
             "Parameter indices which did not receive grad for rank 0: 2 3\n"),
      {});
  REQUIRE(e.has_value());
  CHECK(e->cause.find("parameters unused.bias, unused.weight (indices 2 3) on rank 0") !=
        std::string::npos);
  CHECK(e->fix.find("TORCH_DISTRIBUTED_DEBUG") == std::string::npos);
}

TEST_CASE("explain: a graph that changed under static_graph=True says so") {
  auto e = Explain(Failed("Expected to have finished reduction in the prior iteration before "
                          "starting a new one. This error indicates that your training graph "
                          "has changed in this iteration, e.g., one parameter is used in first "
                          "iteration, but then got unused in the second iteration. this is not "
                          "compatible with static_graph set to True.\nParameter indices which "
                          "did not receive grad for rank 0: 5"),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->cause.find("DDP(static_graph=True) got no gradient for parameters with indices 5") == 0);
  CHECK(e->fix.find("static_graph=False") != std::string::npos);
}

// torch/csrc/autograd/saved_variable.cpp, SavedVariable::unpack.
TEST_CASE("explain: a tensor saved for backward and changed in place is named with its versions") {
  auto e = Explain(Failed("RuntimeError: one of the variables needed for gradient computation has "
                          "been modified by an inplace operation: [torch.FloatTensor [4]] is at "
                          "version 1; expected version 0 instead. Hint: enable anomaly detection"),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "in-place modified tensor");
  CHECK(e->cause ==
        "autograd saved the tensor [torch.FloatTensor [4]] for backward and it was changed in "
        "place before backward (version 1, expected 0)");
  CHECK(e->fix.find("broadcast_buffers=False") != std::string::npos);
}

TEST_CASE("explain: a port in use is named with what holds it") {
  ExplainContext c;
  c.port_holder = [](int port) { return port == 33467 ? std::string("python3 (pid 7)") : ""; };
  auto e = Explain(Failed("torch.distributed.DistNetworkError: The server socket has failed to "
                          "listen on any local network address. port: 33467, useIpv6: false, "
                          "code: -98, name: EADDRINUSE, message: address already in use"),
                   c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "address in use");
  CHECK(e->cause ==
        "port 33467 of this host is already in use (EADDRINUSE): python3 (pid 7) listens on it");
  e = Explain(Failed("OSError: [Errno 98] Address already in use"), {});
  REQUIRE(e.has_value());
  CHECK(e->cause == "a port of this host is already in use (EADDRINUSE)");
}

// torch 2.12's Gloo, init_process_group after destroy_process_group.
TEST_CASE("explain: Gloo refused at a running peer's published address: a group made again") {
  const std::string text =
      "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/"
      "tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:"
      "55732$1";
  CHECK_FALSE(Explain(Failed("", text), {}).has_value());  // a peer may have died: no guess
  ExplainContext c;
  c.peers_running = true;
  auto e = Explain(Failed("", text), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "process group made again");
  CHECK(e->cause.rfind("Gloo was refused at 127.0.0.1:55732, the address another rank published "
                       "in the job's store, while every rank was running: it is an earlier "
                       "process group's.",
                       0) == 0);
  CHECK(e->fix.find("store=PrefixStore(f\"pg{n}/\"") != std::string::npos);
}

TEST_CASE("explain: ranks that built different models are named with the counts or the shape") {
  auto e = Explain(Failed("[rank1]: RuntimeError: DDP expects same model across all ranks, but "
                          "Rank 1 has 6 params, while rank 0 has inconsistent 4 params."),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "model differs across ranks");
  CHECK(e->cause == "the ranks built different models: rank 1 has 6 parameters, rank 0 has 4");
  CHECK(e->fix.find("no layers that depend on the rank") != std::string::npos);
  e = Explain(Failed("RuntimeError: [1]: params[0] in this process with sizes [5, 4] appears not "
                     "to match sizes of the same param in process 0."),
              {});
  REQUIRE(e.has_value());
  CHECK(e->cause ==
        "the ranks built different models: parameter 0 is [5, 4] on rank 1 and another shape on "
        "rank 0");
}

// Gloo's tcp device and NCCL's bootstrap, as torch 2.12 and NCCL 2.28 print them.
TEST_CASE("explain: a socket interface variable naming no usable interface") {
  ExplainContext c;
  c.interfaces = {{"lo", IFF_UP | IFF_LOOPBACK, {{AF_INET, "127.0.0.1"}}},
                  {"eth0", IFF_UP, {{AF_INET, "192.0.2.2"}}},
                  {"ifb0", 0, {}}};
  const std::string gloo =
      "RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
      "ifa != nullptr. Unable to find address for: eth9";
  c.gloo_socket_ifname = "lo,eth9";
  auto e = Explain(Failed("", gloo), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "network interface");
  CHECK(e->cause ==
        "Gloo found no address on this host for GLOO_SOCKET_IFNAME=lo,eth9: eth9 is no "
        "interface of this host");
  CHECK(e->fix ==
        "set GLOO_SOCKET_IFNAME to interfaces of this host with an address (lo 127.0.0.1, eth0 "
        "192.0.2.2), the ones other nodes reach it by, or unset it");
  c.gloo_socket_ifname = "";  // the program set it itself
  e = Explain(Failed("",
                     "RuntimeError: [enforce fail at device.cc:84] ifa != nullptr. Unable to "
                     "find address for: ifb0"),
              c);
  REQUIRE(e.has_value());
  CHECK(e->cause == "Gloo found no address on this host for ifb0: ifb0 has no IP address");

  const std::string nccl =
      "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3690, internal "
      "error - please report this issue to the NCCL developers, NCCL version 2.28.9\n"
      "ncclInternalError: Internal check failed.\nLast error:\nBootstrap : no socket interface "
      "found";
  c.nccl_socket_ifname = "ens";
  e = Explain(Failed(nccl), c);
  REQUIRE(e.has_value());
  CHECK(e->cause ==
        "NCCL found no network interface for its bootstrap: NCCL_SOCKET_IFNAME=ens selects none "
        "here: no interface with an address starts with ens");
  CHECK(e->fix.find("(lo 127.0.0.1, eth0 192.0.2.2; =NAME for exactly NAME") != std::string::npos);
  c.nccl_socket_ifname = "";
  e = Explain(Failed(nccl), c);
  REQUIRE(e.has_value());
  CHECK(e->cause == "NCCL found no network interface for its bootstrap");
}

// torch/utils/data/dataloader.py, _MultiProcessingDataLoaderIter._try_get_data.
TEST_CASE("explain: a DataLoader worker's bus error names /dev/shm's size") {
  ExplainContext c;
  c.shm_size_bytes = 64ull << 20;
  auto e = Explain(Failed("RuntimeError: DataLoader worker (pid 14614) is killed by signal: Bus "
                          "error. It is possible that dataloader's workers are out of shared "
                          "memory."),
                   c);
  REQUIRE(e.has_value());
  CHECK(e->cause ==
        "DataLoader worker pid 14614 died of SIGBUS: batches pass through /dev/shm, which ran "
        "out (/dev/shm is 64.0 MiB)");
  CHECK(e->fix.find("--shm-size") != std::string::npos);
}

// PyTorch's libshm (torch/lib/libshm, c10's MapAllocator): a DataLoader worker's batch.
TEST_CASE("explain: /dev/shm full under a DataLoader is named, not another filesystem") {
  ExplainContext c;
  c.shm_size_bytes = 2ull << 20;
  c.log_dir = "/tmp/logs";
  c.log_free_bytes = 70ull << 30;  // attack 80: "so the full one is another"
  for (const char* said :
       {"RuntimeError: unable to allocate shared memory(shm) for file </torch_967_3737118094_0>: "
        "No space left on device (28)",
        "RuntimeError: unable to write to file </torch_18692_1954506624>: No space left on device "
        "(28)"}) {
    auto e = Explain(Failed(std::string("RuntimeError: Caught RuntimeError in DataLoader worker "
                                        "process 0.\n") +
                            said),
                     c);
    REQUIRE(e.has_value());
    CHECK(e->signature == "shared memory full");
    CHECK(e->cause.rfind("a tensor passed between processes (a DataLoader worker's batch) found "
                         "/dev/shm full: PyTorch could not make its segment /torch_",
                         0) == 0);
    CHECK(e->cause.find("(/dev/shm is 2.0 MiB)") != std::string::npos);
    CHECK(e->fix.find("--shm-size") != std::string::npos);
  }
}

// torch/distributed/distributed_c10d.py, _get_default_group.
TEST_CASE("explain: a collective before init_process_group") {
  auto e = Explain(Failed("ValueError: Default process group has not been initialized, please "
                          "make sure to call init_process_group."),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "process group not initialized");
}

// CPython Modules/_threadmodule.c; glibc's EAGAIN as OpenBLAS and libgomp print it.
TEST_CASE("explain: threads refused name RLIMIT_NPROC's numbers") {
  ExplainContext c;
  env::LimitFacts f;
  f.uid = 1000;
  f.user = "alice";
  f.nproc = {200, 400};
  f.user_processes = {{1, 150, "python"}, {2, 48, "python"}};
  c.limits = f;
  for (const char* text : {"RuntimeError: can't start new thread",
                           "OpenBLAS blas_thread_init: pthread_create failed for thread 3 of 8: "
                           "Resource temporarily unavailable",
                           "libgomp: Thread creation failed: Resource temporarily unavailable",
                           "BlockingIOError: [Errno 11] Resource temporarily unavailable"}) {
    auto e = Explain(Failed(text), c);
    REQUIRE(e.has_value());
    CHECK(e->signature == "thread limit");
    CHECK(
        e->cause.find("RLIMIT_NPROC of alice is soft 200, hard 400; alice runs 198 threads now") !=
        std::string::npos);
    // What holds them, read as the failure is explained (the start-up refusal names them too).
    CHECK(e->cause.find("threads now (the most: pid 1 python: 150, pid 2 python: 48)") !=
          std::string::npos);
    CHECK(e->fix.find("'alice hard nproc N' in /etc/security/limits.d/") != std::string::npos);
  }
}

TEST_CASE("explain: a worker ddprun could not fork names the cgroup's pids.max, for root alone") {
  // Found by an attacking helper: root in a cgroup of pids.max 20 was told to raise ulimit -u.
  ExplainContext c;
  env::LimitFacts f;
  f.uid = 0;
  f.user = "root";
  f.pids_max = 20;
  f.pids_cgroup = "/sys/fs/cgroup/pids/job";
  f.pids_current = 4;
  c.limits = f;
  const FailureRecord start = Failed(
      "start /bin/sleep: fork failed with EAGAIN: a process/thread limit is reached (the user's "
      "RLIMIT_NPROC, ulimit -u, or the cgroup's pids.max): raise it or run fewer processes");
  auto e = Explain(start, c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "thread limit");
  CHECK(e->cause ==
        "a worker could not start a thread or process (EAGAIN): the cgroup's pids.max (20 in "
        "/sys/fs/cgroup/pids/job, 4 in use now) counts every thread of the job, root's too");
  // In a user namespace root's RLIMIT_NPROC applies: both are named.
  c.limits->user_namespace = true;
  CHECK(Explain(start, c)->cause.find("; or the user's limit: RLIMIT_NPROC of root") !=
        std::string::npos);
}

TEST_CASE("explain: a nan loss, by the training script's words or anomaly mode's") {
  auto e = Explain(Failed("RuntimeError: Loss is nan, stopping training at step 3"), {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "non-finite loss");
  CHECK(e->cause == "the loss became nan");
  CHECK(e->fix.find("scaler.unscale_(optimizer) before clip_grad_norm_") != std::string::npos);
  // torch/csrc/autograd/python_anomaly_mode.cpp / engine.cpp.
  e = Explain(
      Failed("RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."), {});
  REQUIRE(e.has_value());
  CHECK(e->cause == "autograd's MulBackward0 returned nan in its output 0");
  CHECK_FALSE(Explain(Failed("assert not torch.isnan(loss)\nAssertionError"), {}).has_value());
}

TEST_CASE("explain: a full disk, said by the worker or found in the log directory") {
  ExplainContext c;
  c.log_dir = "/logs/run";
  c.log_free_bytes = 0;
  // A worker whose output ddprun wrote (--tee, a prefix) never met the full disk itself.
  CHECK_FALSE(Explain(Failed("exitcode 1"), c).has_value());
  c.writes_own_logs = true;  // --redirects: the worker's own writes failed
  auto silent = Explain(Failed("exitcode 1"), c);
  REQUIRE(silent.has_value());
  CHECK(silent->signature == "no space left");
  CHECK(silent->cause.find("the filesystem of the job's log files is full") != std::string::npos);
  CHECK(silent->cause.find("/logs/run has 0 B free") != std::string::npos);
  CHECK(silent->fix.find("--log_dir") != std::string::npos);
  c.log_free_bytes = uint64_t{5} << 30;
  CHECK_FALSE(Explain(Failed("exitcode 1"), c).has_value());  // room left: no guess
  auto said = Explain(Failed("OSError: [Errno 28] No space left on device: 'ckpt.pt'"), c);
  REQUIRE(said.has_value());
  CHECK(said->cause.find("found its filesystem full (ENOSPC)") != std::string::npos);
  // The log directory has room: the full filesystem is another, not the logs'.
  CHECK(said->cause.find("/logs/run has 5.0 GiB free, so the full one is another") !=
        std::string::npos);
  CHECK(said->fix.rfind("df -h shows which filesystem is full", 0) == 0);
}

TEST_CASE("explain: a peer lost after a rank finished names the rank and uneven steps") {
  const std::string closed =
      "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection "
      "closed by peer [127.0.0.1]:35758";
  ExplainContext c;
  c.finished_ranks = {1};
  c.finished_seconds_before = 0.34;
  auto e = Explain(Failed(closed), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "a peer finished first");
  CHECK(e->cause.find("the worker lost its connection to a peer (\"Connection closed by peer\") "
                      "after rank 1 had finished (exited 0, 0.3 s earlier)") == 0);
  CHECK(e->fix.find("DistributedSampler with drop_last=True") != std::string::npos);
  CHECK(e->fix.find("join()") != std::string::npos);

  // A collective that timed out waiting, after two ranks had finished.
  c.finished_ranks = {2, 3};
  e = Explain(Failed("ddp: rank 0: allreduce #12 (4 B) timed out after 5 s"), c);
  REQUIRE(e.has_value());
  CHECK(e->cause.find("the worker waited in a collective until its timeout after ranks 2,3 had "
                      "finished (exited 0, the last 0.3 s earlier)") == 0);

  // No rank finished: the lost peer alone explains nothing.
  CHECK_FALSE(Explain(Failed(closed), {}).has_value());
  // A rank finished, but the worker failed of something else.
  e = Explain(Failed("ModuleNotFoundError: No module named 'numpy'"), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "module not found");
  CHECK_FALSE(Explain(Failed("RuntimeError: boom"), c).has_value());
}

TEST_CASE("explain: a lost peer's words are found wherever they stand") {
  CHECK(LostPeerSign("x: Connection reset by peer\n") == "Connection reset by peer");
  CHECK(LostPeerSign("BrokenPipeError: [Errno 32] Broken pipe") == "Broken pipe");
  CHECK_FALSE(LostPeerSign("RuntimeError: boom").has_value());
}

TEST_CASE("explain: what the worker printed and handled before its last traceback is no cause") {
  // Found by an attacking helper: a caught EADDRINUSE, or a logged nan, named as the cause of
  // a KeyError or a FileNotFoundError.
  const std::string port =
      "warning: metrics port busy ([Errno 98] Address already in use), using another one\n"
      "[W socket.cpp:767] The server socket has failed to listen on any local network address. "
      "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in "
      "use\n";
  const std::string key =
      "Traceback (most recent call last):\n  File \"t.py\", line 9, in <module>\n"
      "KeyError: 'learning_rate'\n";
  CHECK_FALSE(Explain(Failed("exitcode 1", port + key), {}).has_value());
  // The error file (@record) says what killed it; the output's earlier lines do not count.
  CHECK_FALSE(Explain(Failed(key, port), {}).has_value());
  CHECK_FALSE(Explain(Failed("exitcode 1",
                             "step 10: Loss is nan, step skipped by GradScaler\n"
                             "[rank1]: Traceback (most recent call last):\n"
                             "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: "
                             "'/data/shard_0007.bin'\n"),
                      {})
                  .has_value());
  // The same lines with no traceback after them still explain the failure.
  auto nan = Explain(Failed("exitcode 1", "RuntimeError: Loss is nan, stopping training\n"), {});
  REQUIRE(nan.has_value());
  CHECK(nan->cause == "the loss became nan");
}

TEST_CASE("explain: a chained traceback keeps the exception it was raised from") {
  for (const std::string prefix : {"", "[rank1]: "}) {
    CAPTURE(prefix);
    const std::string text =
        "warning: Loss is nan\n" + prefix + "Traceback (most recent call last):\n" + prefix +
        "ModuleNotFoundError: No module named 'apex'\n" + prefix + "\n" + prefix +
        "During handling of the above exception, another exception occurred:\n" + prefix + "\n" +
        prefix + "Traceback (most recent call last):\n" + prefix +
        "RuntimeError: apex is required\n";
    auto e = Explain(Failed("exitcode 1", text), {});
    REQUIRE(e.has_value());
    CHECK(e->signature == "module not found");
  }
}

}  // namespace
}  // namespace ddprun::supervisor
