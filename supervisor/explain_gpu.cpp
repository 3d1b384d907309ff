#include "supervisor/explain_entries.hpp"

#include <cstdlib>
#include <string>

#include "base/format.hpp"

namespace ddprun::supervisor::explain {

namespace {

// `waited` ("rank 1 waited 3 s in allreduce #9 (the collective timeout)")
// while a rank was stopped (ExplainContext::stopped): that rank held it.
Match WhileStopped(const std::string& waited, const ExplainContext& c,
                   const std::string& held = "the collective") {
  return Lines(waited + " while " + c.stopped + ": the stopped rank held " + held +
                   ", the rank that timed out is its victim",
               "continue a stopped rank (kill -CONT) within the collective timeout; if ranks are "
               "stopped on purpose (a debugger), raise the collective timeout meanwhile (ddprun's "
               "hang limits already leave the time a rank is stopped out)");
}

// What ddprun's PyTorch hook recorded names the rank(s) that never came.
std::string LaggardIsCause(const std::string& verdict) {
  const bool several = verdict.rfind("ranks ", 0) == 0;
  return ": " + verdict + ", as ddprun's PyTorch hook recorded: " +
         (several ? "those ranks are the cause and the ranks that timed out are their victims"
                  : "that rank is the cause and the ranks that timed out are its victims");
}
const char* const kLookAtLaggard =
    "look at what it was doing (its output; --hang_timeout below the process group's "
    "timeout dumps every rank's stack before the timeout fires); call the same collectives "
    "on every rank, in the same order; init_process_group(timeout=...) if a step is "
    "legitimately that slow";

}  // namespace

// torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the watchdog (WorkNCCL's operator<<).
Match CollectiveTimeout(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"(\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\()"
                      R"(SeqNum=(\d+), OpType=(\w+)[^)]*Timeout\(ms\)=(\d+)\))");
  if (!m) return {};
  if (!c.stopped.empty()) {
    return WhileStopped("rank " + (*m)[1].str() + " waited " + (*m)[4].str() +
                            " ms (the process group's timeout) in collective number " +
                            (*m)[2].str() + ", a " + (*m)[3].str(),
                        c);
  }
  if (!c.torch_laggards.empty()) {
    return Lines("rank " + (*m)[1].str() + " waited " + (*m)[4].str() +
                     " ms (the process group's timeout) in collective number " + (*m)[2].str() +
                     ", a " + (*m)[3].str() + LaggardIsCause(c.torch_laggards),
                 kLookAtLaggard);
  }
  return Lines("rank " + (*m)[1].str() + " waited " + (*m)[4].str() +
                   " ms (the process group's "
                   "timeout) in collective number " +
                   (*m)[2].str() + ", a " + (*m)[3].str() + ", for ranks that never joined it",
               "look for the rank that failed or took another code path before collective " +
                   (*m)[2].str() +
                   "; --hang_timeout makes ddprun dump the stuck ranks' stacks "
                   "long before the watchdog; init_process_group(timeout=...) if a step is "
                   "legitimately that slow");
}

// gloo/transport/tcp/unbound_buffer.cc: a PyTorch Gloo collective, or a
// send or recv, that waited past the process group's timeout for a peer.
Match GlooTimeout(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"(Timed out waiting (\d+) ?ms for (recv|send) operation to complete)");
  if (!m) return {};
  const std::string waited = "the worker waited " +
                             FormatSeconds(std::strtod((*m)[1].str().c_str(), nullptr) / 1000) +
                             " s (the process group's timeout) in a Gloo " +
                             ((*m)[2] == "recv" ? "receive" : "send") + " for a peer";
  if (!c.stopped.empty()) return WhileStopped(waited, c);
  if (!c.torch_laggards.empty()) {
    return Lines(waited + LaggardIsCause(c.torch_laggards), kLookAtLaggard);
  }
  return Lines(waited +
                   " that never took part: a rank stopped calling collectives (slow, stuck, "
                   "crashed on another node, or on another code path)",
               "--hang_detect=torch names the rank that did not enter the collective, and "
               "--hang_timeout below the process group's timeout dumps every rank's stack "
               "before the timeout fires; init_process_group(timeout=...) if a step is "
               "legitimately that slow");
}

namespace {

const char* const kSameCollectives =
    "make every rank call the same collectives in the same order: the same options, steps and "
    "data sizes on every rank, no collective under a rank-dependent condition (the flight "
    "recorders, DDPRUN_TRACE_FILE, show where they parted)";

}  // namespace

// The DDP core's flight recorders show two ranks in different collectives (or
// one with different sizes) at the same number, however the failed rank then
// ended: Gloo refusing a message of another size (gloo::EnforceNotMet, an
// abort), a peer's closed connection. The divergence is the cause. A failure
// that says its own cause (the DDP core's refusals) keeps it.
Match CollectivesDiverged(const std::string& text, const ExplainContext& c) {
  if (c.diverged.empty()) return {};
  if (c.unasked_signal == 0 && !LostPeerSign(text) && !Has(text, "EnforceNotMet")) return {};
  return Lines(c.diverged + ", and the rank failed after it: their programs diverged",
               kSameCollectives);
}

// ddp/gloo_process_group.cpp and the NCCL one: the DDP core's collective
// timeout. The rank that timed out is a victim: the flight recorders name the
// ones that never came (ExplainContext::never_entered).
Match DdpCollectiveTimeout(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"(ddp: (?:rank (\d+): )?(\w+ #\d+)[^\n]* timed out after ([\d.]+) s)"
                      R"((?: \(collective timeout ([\d.]+) s)?)");
  if (!m) return {};
  const std::string fix =
      " hung, crashed or took another code path before it: --hang_timeout below the collective "
      "timeout dumps every rank's stack before the timeout fires; raise --collective-timeout "
      "(or the program's own) if a step is legitimately that slow";
  const std::string limit = (*m)[4].matched ? ", " + (*m)[4].str() + " s" : "";
  if (!c.diverged.empty()) {
    const std::string after = (*m)[4].matched ? " (" + (*m)[4].str() + " s)" : "";
    return Lines(c.diverged + ", and waited for each other until the collective timeout" + after +
                     " ended it: their programs diverged",
                 kSameCollectives);
  }
  const std::string who = (*m)[1].matched ? "rank " + (*m)[1].str() : "the rank";
  if (!c.stopped.empty()) {
    return WhileStopped(who + " waited " + (*m)[3].str() + " s in " + (*m)[2].str() +
                            " (the collective timeout" + limit + ")",
                        c);
  }
  if (!c.never_entered.empty()) {
    return Lines(c.never_entered + " (the collective timeout" + limit +
                     "): the ranks that timed out are its victims",
                 "look at what the rank(s) that never entered it were doing: one" + fix);
  }
  return Lines(who + " waited " + (*m)[3].str() + " s in " + (*m)[2].str() +
                   " (the collective timeout) for a rank that stopped taking part",
               "look for the rank that never entered " + (*m)[2].str() + ": it" + fix);
}

// ddp/store_exchange.cpp, ddp/gloo_process_group.cpp: the DDP core's set-up (its Gloo
// group, the reducer's exchange of the model's shape) waited for ranks that never came. A
// rank stopped then was not named (attack 109: no cause line at all).
Match DdpSetUpTimeout(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"(rank\(s\) ([\d,]+)(?:,\.\.\. \((\d+) in all\))? did not arrive )"
                      R"(within ([\d.]+) s)");
  if (!m) return {};
  const std::string ranks = (*m)[1].str() + ((*m)[2].matched ? ",..." : "");
  const bool several = ranks.find(',') != std::string::npos;
  const std::string them = several ? "ranks " + ranks : "rank " + ranks;
  const std::string waited = "the worker waited " + (*m)[3].str() +
                             " s (the collective timeout) in the DDP core's set-up for " + them;
  if (!c.stopped.empty()) return WhileStopped(waited, c, "the set-up");
  return Lines(waited + ", which never arrived: " + (several ? "they are" : "it is") +
                   " the cause, the ranks that timed out " + (several ? "their" : "its") +
                   " victims",
               "look at what " + them + (several ? " were" : " was") +
                   " doing (its log): it failed, hung or ran other code before the set-up; raise "
                   "--collective-timeout (DDPRUN_COLLECTIVE_TIMEOUT) if the ranks legitimately "
                   "start that far apart");
}

// torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, monitoredBarrier: the
// rank that raised waited for the ranks it names, the causes. Not for a rank
// declared hung: it caught what the barrier raised and went on to hang
// elsewhere (the hang's verdict names who stopped).
Match MonitoredBarrier(const std::string& text, const ExplainContext& c) {
  if (c.hung) return {};
  auto m = Find(text, R"((?:\[Rank (\d+)\]: )?Ranks? ([\d, ]+?) failed to pass monitoredBarrier)"
                      R"( in (\d+) ms)");
  if (!m) return {};
  std::string ranks = (*m)[2].str();
  const bool several = ranks.find(',') != std::string::npos;
  const std::string waiter = (*m)[1].matched ? "rank " + (*m)[1].str() : "the rank that raised";
  return Lines((several ? "ranks " : "rank ") + ranks + " did not reach monitored_barrier within " +
                   (*m)[3].str() + " ms, while " + waiter +
                   " waited in it: the cause; the rank that raised is its victim",
               "look at what " + std::string(several ? "those ranks were" : "that rank was") +
                   " doing: --hang_timeout below the barrier's timeout (with --hang_detect=torch) "
                   "dumps every rank's stack first; raise monitored_barrier(timeout=...) if it "
                   "is legitimately that slow");
}

// c10/cuda/CUDACachingAllocator.cpp, the OutOfMemoryError message.
Match CudaOutOfMemory(const std::string& text, const ExplainContext&) {
  auto m =
      Find(text, R"(CUDA out of memory\. Tried to allocate ([\d.]+ \w+)\. GPU (\d+) has a total )"
                 R"(capacity of ([\d.]+ \w+) of which ([\d.]+ \w+) is free\.)");
  if (!m) return {};
  std::string others;
  static const std::regex kProcess(R"(Process (\d+) has ([\d.]+ \w+) memory in use)");
  for (std::sregex_iterator it(text.begin(), text.end(), kProcess), end; it != end; ++it) {
    others += (others.empty() ? "; in use by process " : ", process ") + (*it)[1].str() + ": " +
              (*it)[2].str();
  }
  return Lines("GPU " + (*m)[2].str() + " had " + (*m)[4].str() + " free of " + (*m)[3].str() +
                   " when " + (*m)[1].str() + " more was asked for" + others,
               "use a smaller per-rank batch, activation checkpointing or mixed precision; "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when much is reserved but "
               "unallocated; stop other processes on that GPU");
}

namespace {

std::string VisibleDevices(const ExplainContext& c) {
  std::string s = c.visible_devices ? "CUDA_VISIBLE_DEVICES=" + *c.visible_devices
                                    : "CUDA_VISIBLE_DEVICES unset";
  if (c.visible_gpus >= 0) s += ", " + std::to_string(c.visible_gpus) + " GPU(s) visible";
  if (c.nproc_per_node > 0) s += ", --nproc_per_node=" + std::to_string(c.nproc_per_node);
  return s;
}

}  // namespace

// NCCL src/init.cc, the duplicate-device check of ncclCommInitRank.
Match DuplicateGpu(const std::string& text, const ExplainContext& c) {
  auto m =
      Find(text, R"(Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device (\w+))");
  if (!m) return {};
  return Lines("ranks " + (*m)[1].str() + " and " + (*m)[2].str() + " both use CUDA device " +
                   (*m)[3].str() + " (" + VisibleDevices(c) + ")",
               "pick the device by LOCAL_RANK before init_process_group: "
               "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) or "
               "init_process_group(device_id=...); LOCAL_RANK i uses the i-th visible GPU");
}

namespace {

// The kernel's name in what the device runtime prints before ": block:": a
// bare name ("nll_loss_forward_reduce_cuda_kernel_2d", "operator()"), or a
// whole signature ("void at::native::(anonymous namespace)::f<float>(float *,
// ...) [with ...]"), whose name is the identifier before its parameters.
std::string KernelName(std::string function) {
  for (const std::string anonymous : {"(anonymous namespace)", "<unnamed>"}) {
    for (size_t at; (at = function.find(anonymous)) != std::string::npos;) {
      function.erase(at, anonymous.size());
    }
  }
  const bool call_operator = function.rfind("operator()", 0) == 0 ||
                             function.find(" operator()") != std::string::npos ||
                             function.find("::operator()") != std::string::npos;
  std::string name;
  int depth = 0;  // template arguments left out
  for (const char ch : function.substr(0, function.find('('))) {
    if (ch == '<') {
      ++depth;
    } else if (ch == '>') {
      depth -= depth > 0 ? 1 : 0;
    } else if (depth == 0) {
      name += ch;
    }
  }
  const size_t start = name.find_last_of(": ");
  if (start != std::string::npos) name.erase(0, start + 1);
  return call_operator ? name + "()" : name;
}

}  // namespace

// A CUDA kernel's CUDA_KERNEL_ASSERT, as the device runtime prints it ("FILE:
// LINE: FUNC: block: [..], thread: [..] Assertion `COND` failed.", FUNC a
// name or a whole signature) before PyTorch raises "device-side assert
// triggered"; the common conditions are an index out of range, said in plain
// words. The assertion is on the worker's output, not in the traceback of
// the error file: both are read.
Match DeviceAssert(const std::string& text, const ExplainContext& c) {
  if (!Has(text, "device-side assert triggered")) return {};
  constexpr char kAssertion[] =
      R"(:\d+: ([^\n]*?): block: \[[^\]]*\], thread: \[[^\]]*\] Assertion `([^`]+)` failed)";
  auto m = Find(text, kAssertion);
  if (!m) m = Find(c.output_tail, kAssertion);
  std::string cause = "a CUDA kernel's assertion failed";
  if (m) {
    const std::string cond = (*m)[2].str();
    cause += " (" + KernelName((*m)[1].str()) + ": " + cond + ")";
    if (cond.find("n_classes") != std::string::npos) {
      cause +=
          ": a target class index is outside [0, number of classes): the loss got a label the "
          "model has no output for";
    } else if (cond.find("srcIndex < srcSelectDimSize") != std::string::npos) {
      cause +=
          ": an index is beyond the indexed tensor's size, e.g. a token id at or above an "
          "embedding's num_embeddings";
    } else if (cond.find("index out of bounds") != std::string::npos) {
      cause += ": an index is out of bounds";
    } else if (cond.find("input_val >= zero && input_val <= one") != std::string::npos) {
      cause +=
          ": binary_cross_entropy got an input outside [0, 1] (apply sigmoid first, or use "
          "BCEWithLogitsLoss)";
    }
  }
  return Lines(cause,
               "check the range of the labels or indices fed to that op; CUDA_LAUNCH_BLOCKING=1 "
               "makes the traceback name the op (CUDA reports kernel errors later, at another "
               "call); the same batch on the CPU raises an error that names the value");
}

// torch/distributed/distributed_c10d.py, _new_process_group_helper: NCCL
// asked for where PyTorch sees no GPU (a CPU host, a login node, CPU CI).
Match NcclWithoutGpu(const std::string& text, const ExplainContext& c) {
  if (!Has(text, "ProcessGroupNCCL is only supported with GPUs, no GPUs found")) return {};
  std::string why;
  if (c.visible_devices && c.visible_devices->empty()) {
    why = "CUDA_VISIBLE_DEVICES is empty, which hides every GPU";
  } else if (c.visible_gpus > 0) {
    why = "PyTorch's CUDA found none of the " + std::to_string(c.visible_gpus) +
          " GPU(s) visible to them: a CPU-only PyTorch, or a driver older than PyTorch's CUDA "
          "(python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())')";
  } else if (c.visible_gpus == 0) {
    why = "none is visible (" + VisibleDevices(c) + ")";
  } else {
    why = "ddprun found no NVIDIA driver (NVML) on this host either";
  }
  return Lines("the workers made an NCCL process group, which needs GPUs, and saw none: " + why,
               "on a host without GPUs use Gloo: init_process_group(\"gloo\"), or "
               "backend=\"cpu:gloo,cuda:nccl\" to use each where it fits; on a GPU host make its "
               "GPUs visible (CUDA_VISIBLE_DEVICES, --gpus)");
}

// The CUDA runtime's cudaErrorInvalidDevice text, as torch raises it.
Match InvalidDeviceOrdinal(const std::string& text, const ExplainContext& c) {
  if (!Has(text, "CUDA error: invalid device ordinal")) return {};
  return Lines("a worker asked for a CUDA device index it does not see (" + VisibleDevices(c) + ")",
               "index devices by LOCAL_RANK among the visible ones (cuda:LOCAL_RANK, not the "
               "host's GPU number), and run no more workers per node than visible GPUs");
}

// NCCL's shared-memory transport (misc/shmutils.cc) between ranks of one
// host: "Error while creating shared memory segment /dev/shm/nccl-X (size N)",
// with ", error: <strerror> (<errno>)" in its last error.
Match NcclSharedMemory(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"((?:Error while creating shared memory segment|failed to extend) )"
                      R"((/dev/shm/nccl-[^ \n]+?)(?: \(size (\d+)\)| to (\d+) bytes))"
                      R"((?:, error: ([^\n(]+?) \(\d+\))?)");
  if (!m) return {};
  const std::string size = (*m)[2].matched ? (*m)[2].str() : (*m)[3].str();
  std::string cause = "NCCL could not create its shared-memory segment " + (*m)[1].str() + " (" +
                      FormatBytes(std::stoull(size)) + ")";
  if ((*m)[4].matched) cause += ": " + (*m)[4].str();
  if (c.shm_size_bytes) cause += "; /dev/shm is " + FormatBytes(*c.shm_size_bytes);
  return Lines(cause,
               "enlarge /dev/shm: docker run --shm-size=8g (or --ipc=host), Kubernetes an emptyDir "
               "with medium Memory on /dev/shm; remove /dev/shm/nccl-* files left by dead jobs; "
               "or NCCL_SHM_DISABLE=1 (slower transfers between this host's GPUs)");
}

}  // namespace ddprun::supervisor::explain
