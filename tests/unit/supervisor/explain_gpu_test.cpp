// The explanations of collective timeouts and of what GPUs, CUDA and NCCL
// say (supervisor/explain_gpu.cpp).
#include <doctest/doctest.h>

#include <string>

#include "supervisor/explain.hpp"
#include "tests/unit/supervisor/explain_test_util.hpp"

namespace ddprun::supervisor {
namespace {

using explain_test::Failed;

// torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the watchdog's timeout message.
TEST_CASE("explain: a collective timeout names the rank, the collective and the timeout") {
  auto e = Explain(Failed("",
                          "[rank3]:[E1218 20:27:21.426 ProcessGroupNCCL.cpp:629] [Rank 3] "
                          "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=21, "
                          "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
                          "for 600081 milliseconds before timing out.\n"),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "collective timeout");
  CHECK(e->cause ==
        "rank 3 waited 600000 ms (the process group's timeout) in collective number 21, a "
        "ALLREDUCE, for ranks that never joined it");
  CHECK(e->fix.find("--hang_timeout") != std::string::npos);
}

TEST_CASE("explain: a collective timeout names the rank the PyTorch hook saw lag behind") {
  // Found comparing with C++ workers: a PyTorch rank that timed out in a collective was the
  // root cause with only Gloo's or NCCL's words; the hook's record names the rank that never came.
  const std::string gloo =
      "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
      "Timed out waiting 4000ms for recv operation to complete";
  auto bare = Explain(Failed("", gloo), {});
  REQUIRE(bare.has_value());
  CHECK(bare->signature == "Gloo timeout");
  CHECK(bare->cause ==
        "the worker waited 4 s (the process group's timeout) in a Gloo receive for a peer that "
        "never took part: a rank stopped calling collectives (slow, stuck, crashed on another "
        "node, or on another code path)");
  CHECK(bare->fix.rfind("--hang_detect=torch names the rank", 0) == 0);
  ExplainContext c;
  c.torch_laggards = "rank 1 did not enter gloo:all_reduce #4 (rank 0 waits in it)";
  auto named = Explain(Failed("", gloo), c);
  REQUIRE(named.has_value());
  CHECK(named->cause ==
        "the worker waited 4 s (the process group's timeout) in a Gloo receive for a peer: rank 1 "
        "did not enter gloo:all_reduce #4 (rank 0 waits in it), as ddprun's PyTorch hook "
        "recorded: that rank is the cause and the ranks that timed out are its victims");
  CHECK(named->fix.rfind("look at what it was doing", 0) == 0);
  c.torch_laggards = "ranks 1,2 did not enter nccl:all_reduce #21 (rank 3 waits in it)";
  auto nccl = Explain(Failed("",
                             "[Rank 3] Watchdog caught collective operation timeout: "
                             "WorkNCCL(SeqNum=21, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                             "Timeout(ms)=600000) ran for 600081 milliseconds"),
                      c);
  REQUIRE(nccl.has_value());
  CHECK(nccl->cause ==
        "rank 3 waited 600000 ms (the process group's timeout) in collective number 21, a "
        "ALLREDUCE: ranks 1,2 did not enter nccl:all_reduce #21 (rank 3 waits in it), as ddprun's "
        "PyTorch hook recorded: those ranks are the cause and the ranks that timed out are their "
        "victims");
  // A stopped rank says more than the record (it stopped inside or before the collective).
  c.stopped = "rank 1 was stopped by a signal (SIGSTOP)";
  auto stopped = Explain(Failed("", gloo), c);
  REQUIRE(stopped.has_value());
  CHECK(stopped->cause.find("while rank 1 was stopped by a signal (SIGSTOP)") != std::string::npos);
}

// torch/csrc/distributed/c10d/ProcessGroupGloo.cpp: monitoredBarrier names the ranks it missed.
TEST_CASE("explain: monitored_barrier names the ranks that never reached it, not the raiser") {
  auto e = Explain(Failed("",
                          "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in "
                          "3000 ms\n Original exception: \n[../third_party/gloo/gloo/"
                          "transport/tcp/pair.cc:534] Read error\n"),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "monitored barrier");
  CHECK(e->cause ==
        "rank 1 did not reach monitored_barrier within 3000 ms, while rank 0 waited in it: the "
        "cause; the rank that raised is its victim");
  auto all = Explain(
      Failed("", "RuntimeError: Ranks 1, 2 failed to pass monitoredBarrier in 5000 ms\n"), {});
  REQUIRE(all.has_value());
  CHECK(all->cause.rfind("ranks 1, 2 did not reach monitored_barrier within 5000 ms, while the "
                         "rank that raised waited in it",
                         0) == 0);
  CHECK(all->fix.find("those ranks were") != std::string::npos);
  // A rank that caught it and hung later: the barrier's ranks are no cause of that.
  FailureRecord hung = Failed("hung: no heartbeat for 3.0 s (--hang_timeout=3)",
                              "probe failed: [Rank 0]: Rank 1 failed to pass monitoredBarrier in "
                              "1000 ms\nstep 10\n");
  hung.hung = true;
  CHECK_FALSE(Explain(hung, {}).has_value());
}

// ddp/gloo_process_group.cpp: the DDP core's collective timeout, with and without the recorders.
TEST_CASE("explain: the DDP core's collective timeout names the rank that never came") {
  const std::string text =
      "train: rank 0: step 3: backward: ddp: rank 0: allreduce #9 (548.0 KiB float32) timed out "
      "after 3 s (collective timeout 3 s; a rank stopped participating): connections shut down\n";
  ExplainContext c;
  auto bare = Explain(Failed("", text), c);
  REQUIRE(bare.has_value());
  CHECK(bare->signature == "DDP collective timeout");
  CHECK(bare->cause ==
        "rank 0 waited 3 s in allreduce #9 (the collective timeout) for a rank that stopped "
        "taking part");
  // A rank stopped (SIGSTOP) past the timeout, found so as the group stopped (found by an
  // attacking helper: the report said only to look for the rank that never entered).
  ExplainContext stopped;
  stopped.stopped = "rank 1 was stopped by a signal (SIGSTOP)";
  auto held = Explain(Failed("", text), stopped);
  REQUIRE(held.has_value());
  CHECK(held->cause ==
        "rank 0 waited 3 s in allreduce #9 (the collective timeout, 3 s) while rank 1 was "
        "stopped by a signal (SIGSTOP): the stopped rank held the collective, the rank that "
        "timed out is its victim");
  CHECK(held->fix.find("kill -CONT") != std::string::npos);
  auto watchdog = Explain(Failed("",
                                 "[Rank 3] Watchdog caught collective operation timeout: "
                                 "WorkNCCL(SeqNum=21, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                                 "Timeout(ms)=600000) ran for 600081 milliseconds\n"),
                          stopped);
  REQUIRE(watchdog.has_value());
  CHECK(watchdog->cause.rfind("rank 3 waited 600000 ms (the process group's timeout) in "
                              "collective number 21, a ALLREDUCE while rank 1 was stopped",
                              0) == 0);
  c.never_entered =
      "rank 1 never entered allreduce #9 (548.0 KiB), in which ranks 0,2 waited "
      "until it failed";
  auto named = Explain(Failed("", text), c);
  REQUIRE(named.has_value());
  CHECK(named->cause == c.never_entered +
                            " (the collective timeout, 3 s): the ranks that timed out are its "
                            "victims");
  CHECK(named->fix.find("--hang_timeout below the collective timeout") != std::string::npos);
  // The NCCL communicator's watchdog in the DDP core says it without the rank or the limit.
  auto nccl = Explain(Failed("",
                             "ddp: allreduce #9 (548.0 KiB float32) on nccl timed out after "
                             "5 s: communicator aborted\n"),
                      c);
  REQUIRE(nccl.has_value());
  CHECK(nccl->cause == c.never_entered +
                           " (the collective timeout): the ranks that timed out "
                           "are its victims");
  // Both entered #9, but different collectives: the programs diverged (found by an attacking
  // helper: the report said to look for the rank that never entered it).
  c.diverged =
      "rank 1 is in broadcast #9 while rank 0 is in allreduce #9: the ranks issue "
      "different collectives";
  auto diverged = Explain(Failed("", text), c);
  REQUIRE(diverged.has_value());
  CHECK(diverged->cause == c.diverged +
                               ", and waited for each other until the collective timeout (3 s) "
                               "ended it: their programs diverged");
  CHECK(diverged->fix.rfind("make every rank call the same collectives in the same order", 0) == 0);
}

TEST_CASE("explain: the DDP core's set-up names the ranks that never came, or the stopped one") {
  // Attack 109: a rank stopped (SIGSTOP) during the set-up left the report without a cause.
  const std::string text =
      "train: rank 0: create the reducer: rank(s) 1 did not arrive within 3 s (no record under "
      "ddp/attempt_0/reducer/): they failed, hang or run other code before this point; their "
      "logs say which\n";
  ExplainContext c;
  auto bare = Explain(Failed("", text), c);
  REQUIRE(bare.has_value());
  CHECK(bare->signature == "DDP core set-up timeout");
  CHECK(bare->cause ==
        "the worker waited 3 s (the collective timeout) in the DDP core's set-up for rank 1, "
        "which never arrived: it is the cause, the ranks that timed out its victims");
  c.stopped = "rank 1 was stopped by a signal (SIGSTOP)";
  auto held = Explain(Failed("", text), c);
  REQUIRE(held.has_value());
  CHECK(held->cause ==
        "the worker waited 3 s (the collective timeout) in the DDP core's set-up for rank 1 "
        "while rank 1 was stopped by a signal (SIGSTOP): the stopped rank held the set-up, the "
        "rank that timed out is its victim");
  auto gloo = Explain(Failed("",
                             "ddp: gloo: rank(s) 2,3 did not arrive within 1.5 s: they "
                             "failed, hang or started late; their logs say which\n"),
                      ExplainContext{});
  REQUIRE(gloo.has_value());
  CHECK(gloo->cause.find("for ranks 2,3, which never arrived: they are the cause") !=
        std::string::npos);
}

TEST_CASE("explain: ranks whose collectives diverged, however the failed one then ended") {
  // Gloo refuses a message of another size with an exception from its I/O thread: the rank
  // aborts, and the cause line named the C++ exception (found by an attacking helper).
  ExplainContext c;
  c.unasked_signal = SIGABRT;
  const FailureRecord abort =
      Failed("Signal 6 (SIGABRT) received by PID 7",
             "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
             "  what():  [enforce fail at gloo/transport/tcp/pair.cc:446] op.preamble.length <= "
             "op.nbytes. 512 vs 4\n");
  auto before = Explain(abort, c);
  REQUIRE(before.has_value());
  CHECK(before->signature == "native crash");
  c.diverged =
      "rank 1 ran allreduce #12 with 4 B while rank 0 ran it with 512 B: the ranks pass "
      "different sizes";
  auto e = Explain(abort, c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "collectives diverged");
  CHECK(e->cause == c.diverged + ", and the rank failed after it: their programs diverged");
  CHECK(e->fix.rfind("make every rank call the same collectives in the same order", 0) == 0);
  // A peer's closed connection after the divergence.
  c.unasked_signal = 0;
  auto closed = Explain(Failed("ddp: rank 0: allreduce #13 (4 B float32): Connection closed by "
                               "peer"),
                        c);
  REQUIRE(closed.has_value());
  CHECK(closed->signature == "collectives diverged");
  // What the DDP core itself said: its own refusal stays the cause, without a line added.
  CHECK_FALSE(Explain(Failed("ddp: rank 0, step 0: 1 parameter(s) got no gradient: "
                             "layers.2.weight [4, 4]. Either remove them from the model"),
                      c)
                  .has_value());
}

// c10/cuda/CUDACachingAllocator.cpp, the OutOfMemoryError message.
TEST_CASE("explain: CUDA out of memory names the GPU, the sizes and the other processes") {
  auto e = Explain(Failed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                          "GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is free. "
                          "Process 1234 has 40.00 GiB memory in use. Process 99 has 30.00 GiB "
                          "memory in use. Of the allocated memory ..."),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "CUDA out of memory");
  CHECK(e->cause ==
        "GPU 0 had 1.23 GiB free of 79.15 GiB when 2.00 GiB more was asked for; in use by "
        "process 1234: 40.00 GiB, process 99: 30.00 GiB");
}

ExplainContext Gpus() {
  ExplainContext c;
  c.visible_devices = "0,1";
  c.visible_gpus = 2;
  c.nproc_per_node = 4;
  return c;
}

// NCCL src/init.cc; the CUDA runtime's cudaErrorInvalidDevice string.
TEST_CASE("explain: device mix-ups name the ranks and the visible devices") {
  auto e = Explain(Failed("torch.distributed.DistBackendError: NCCL error ... Duplicate GPU "
                          "detected : rank 1 and rank 0 both on CUDA device 1a000"),
                   Gpus());
  REQUIRE(e.has_value());
  CHECK(e->signature == "duplicate GPU");
  CHECK(e->cause ==
        "ranks 1 and 0 both use CUDA device 1a000 (CUDA_VISIBLE_DEVICES=0,1, 2 GPU(s) visible, "
        "--nproc_per_node=4)");
  CHECK(e->fix.find("LOCAL_RANK") != std::string::npos);
  e = Explain(Failed("torch.AcceleratorError: CUDA error: invalid device ordinal"), Gpus());
  REQUIRE(e.has_value());
  CHECK(e->signature == "invalid device ordinal");
  CHECK(e->cause.find("(CUDA_VISIBLE_DEVICES=0,1, 2 GPU(s) visible, --nproc_per_node=4)") !=
        std::string::npos);
}

// The device runtime's assertion line and PyTorch's error, as torch 2.x prints them.
TEST_CASE("explain: a device-side assert names the kernel, the condition and, known, its meaning") {
  const std::string error =
      "RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be "
      "asynchronously reported at some other API call, so the stacktrace below might be "
      "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n";
  auto e = Explain(Failed(error,
                          "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: "
                          "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0] "
                          "Assertion `t >= 0 && t < n_classes` failed.\n"),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "CUDA device-side assert");
  CHECK(e->cause ==
        "a CUDA kernel's assertion failed (nll_loss_forward_reduce_cuda_kernel_2d: t >= 0 && t < "
        "n_classes): a target class index is outside [0, number of classes): the loss got a label "
        "the model has no output for");
  CHECK(e->fix.find("CUDA_LAUNCH_BLOCKING=1") != std::string::npos);
  e = Explain(Failed(error,
                     "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1369: "
                     "indexSelectLargeIndex: block: [14,0,0], thread: [64,0,0] Assertion "
                     "`srcIndex < srcSelectDimSize` failed.\n"),
              {});
  REQUIRE(e.has_value());
  CHECK(e->cause.find(": a token id at or above") == std::string::npos);
  CHECK(e->cause.find("e.g. a token id at or above an embedding's num_embeddings") !=
        std::string::npos);
  e = Explain(Failed(error), {});
  REQUIRE(e.has_value());
  CHECK(e->cause == "a CUDA kernel's assertion failed");
}

// On an H200 with torch 2.11 the error file held the Python traceback, and the device runtime's
// line (the kernel's whole signature) was only on the worker's output.
TEST_CASE("explain: a device-side assert is read from the output beside a traceback") {
  const std::string traceback =
      "Traceback (most recent call last):\n  File \"gpu_device_assert.py\", line 12, in "
      "<module>\n    loss.item()\ntorch.AcceleratorError: CUDA error: device-side assert "
      "triggered\nSearch for `cudaErrorAssert' in "
      "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more "
      "information.\n";
  const std::string kernel =
      "/pytorch/aten/src/ATen/native/cuda/Loss.cu:245: void at::native::(anonymous "
      "namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, long>(scalar_t *, scalar_t *, "
      "const scalar_t *, const int64_t *, const scalar_t *, bool, int64_t, int64_t, int64_t, "
      "int64_t) [with scalar_t = float, index_t = long]: block: [0,0,0], thread: [3,0,0] "
      "Assertion `t >= 0 && t < n_classes` failed.\n";
  auto e = Explain(Failed(traceback, kernel + kernel + traceback), {});
  REQUIRE(e.has_value());
  CHECK(e->cause ==
        "a CUDA kernel's assertion failed (nll_loss_forward_reduce_cuda_kernel_2d: t >= 0 && t < "
        "n_classes): a target class index is outside [0, number of classes): the loss got a label "
        "the model has no output for");
  e = Explain(Failed(traceback,
                     "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:111: operator(): block: "
                     "[0,0,0], thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] "
                     "&& \"index out of bounds\"` failed.\n"),
              {});
  REQUIRE(e.has_value());
  CHECK(e->cause.rfind("a CUDA kernel's assertion failed (operator(): -sizes[i] <= index", 0) == 0);
  CHECK(e->cause.find(": an index is out of bounds") != std::string::npos);
}

// torch 2.12, init_process_group("nccl") where PyTorch sees no GPU.
TEST_CASE("explain: NCCL without a GPU says why none was seen") {
  const std::string text =
      "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!";
  ExplainContext c;
  c.visible_devices = "";
  auto e = Explain(Failed(text), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "NCCL without a GPU");
  CHECK(e->cause ==
        "the workers made an NCCL process group, which needs GPUs, and saw none: "
        "CUDA_VISIBLE_DEVICES is empty, which hides every GPU");
  CHECK(e->fix.find("init_process_group(\"gloo\")") != std::string::npos);
  c.visible_devices = std::nullopt;
  c.visible_gpus = 8;
  e = Explain(Failed(text), c);
  REQUIRE(e.has_value());
  CHECK(e->cause.find("PyTorch's CUDA found none of the 8 GPU(s) visible to them: a CPU-only "
                      "PyTorch, or a driver older") != std::string::npos);
  c.visible_gpus = -1;
  e = Explain(Failed(text), c);
  REQUIRE(e.has_value());
  CHECK(e->cause.find("ddprun found no NVIDIA driver (NVML) on this host either") !=
        std::string::npos);
}

// As PyTorch's DistBackendError carries NCCL's last error, and as NCCL_DEBUG=WARN prints it.
TEST_CASE("explain: NCCL's shared memory segment refused names /dev/shm's size") {
  ExplainContext c;
  c.shm_size_bytes = 64ull << 20;
  auto e = Explain(
      Failed("torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:94\n"
             "ncclSystemError: System call (e.g. socket, malloc) or external library call "
             "failed or device error.\nLast error:\nError while creating shared memory segment "
             "/dev/shm/nccl-cjY8K5 (size 10617216), error: No space left on device (28)"),
      c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "NCCL shared memory");
  CHECK(e->cause ==
        "NCCL could not create its shared-memory segment /dev/shm/nccl-cjY8K5 (10.1 MiB): No "
        "space left on device; /dev/shm is 64.0 MiB");
  CHECK(e->fix.find("NCCL_SHM_DISABLE=1") != std::string::npos);
  e = Explain(Failed("",
                     "3d3e22c3066f:168:168 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to "
                     "extend /dev/shm/nccl-UbzKZ9 to 9637892 bytes\n"),
              {});
  REQUIRE(e.has_value());
  CHECK(e->cause ==
        "NCCL could not create its shared-memory segment /dev/shm/nccl-UbzKZ9 (9.2 MiB)");
}

}  // namespace
}  // namespace ddprun::supervisor
