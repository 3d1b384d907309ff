#include "supervisor/explain.hpp"

#include <csignal>
#include <regex>
#include <vector>

#include "base/format.hpp"
#include "supervisor/exit_status.hpp"

namespace ddprun::supervisor {

namespace {

// The text a failure is matched against: its traceback or message, then its
// last output lines (a worker without an error file still printed why).
std::string TextOf(const FailureRecord& f) { return f.message + "\n" + f.output_tail; }

// The quoted name after `marker` ("No module named 'torch'" gives torch).
std::optional<std::string> QuotedAfter(const std::string& text, const std::string& marker) {
  auto at = text.rfind(marker);
  if (at == std::string::npos) return std::nullopt;
  size_t open = at + marker.size();
  if (open >= text.size() || (text[open] != '\'' && text[open] != '"')) return std::nullopt;
  size_t close = text.find(text[open], open + 1);
  if (close == std::string::npos || close == open + 1 || close - open > 200) return std::nullopt;
  return text.substr(open + 1, close - open - 1);
}

// The first match of `pattern` in `text`; its groups index the result.
std::optional<std::smatch> Find(const std::string& text, const char* pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return std::nullopt;
  return m;
}

bool Has(const std::string& text, const char* needle) {
  return text.find(needle) != std::string::npos;
}

using Match = std::optional<Explanation>;

Explanation Lines(std::string cause, std::string fix) {
  Explanation e;
  e.cause = std::move(cause);
  e.fix = std::move(fix);
  return e;
}

struct Entry {
  const char* signature;
  std::function<Match(const std::string&, const ExplainContext&)> match;
};

// The kernel's OOM killer (env/memory.hpp): a worker, or a DataLoader worker
// of it, killed by a SIGKILL nobody in the job sent while the OOM kill count
// rose: it ran out of memory, its cgroup's or the host's.
Match OomKilled(const std::string& text, const ExplainContext& c) {
  const bool loader = Has(text, "is killed by signal: Killed");
  if (!c.memory || (c.unasked_signal != SIGKILL && !loader)) return {};
  const env::MemoryFacts& m = *c.memory;
  const uint64_t in_cgroup = m.cgroup_oom_kills.value_or(0);
  const uint64_t on_host = m.host_oom_kills.value_or(0);
  if (in_cgroup == 0 && on_host == 0) return {};
  std::string cause = std::string(loader ? "a DataLoader worker of it" : "the worker") +
                      " died of SIGKILL, which ddprun did not send, and the kernel's OOM killer "
                      "killed ";
  if (in_cgroup > 0) {
    cause += std::to_string(in_cgroup) + " process(es) of the job's memory cgroup meanwhile";
  } else {
    cause += std::to_string(on_host) + " process(es) on this host meanwhile (/proc/vmstat)";
  }
  if (m.cgroup_limit) {
    cause += "; the memory cgroup " + m.cgroup + " has a limit of " + FormatBytes(*m.cgroup_limit);
    if (m.cgroup_peak) cause += " (peak use " + FormatBytes(*m.cgroup_peak) + ")";
  }
  if (m.mem_total && m.mem_available) {
    cause += "; the host has " + FormatBytes(*m.mem_total) + ", " + FormatBytes(*m.mem_available) +
             " available now";
  }
  return Lines(cause,
               "give each worker less host memory (DataLoader num_workers and prefetch_factor; "
               "a dataset loaded once per host and memory-mapped, not copied by every rank and "
               "DataLoader worker), run fewer workers per node, or get more memory (a higher "
               "limit: Slurm --mem, docker --memory); the kernel log (dmesg) names what was "
               "killed and its size");
}

// faulthandler's "File "PATH", line N in FUNC" lines: a library's (the
// standard library, site-packages) or the program's own.
bool LibraryFrame(const std::string& path) {
  return path.find("/site-packages/") != std::string::npos ||
         path.find("/dist-packages/") != std::string::npos ||
         std::regex_search(path, std::regex(R"(/lib/python\d)"));
}

// A worker that died of a crash signal nobody in the job sent: native code
// (an extension, CUDA, NCCL, a library built for another version) crashed, or
// C++ terminated on an uncaught exception. Python's faulthandler
// (PYTHONFAULTHANDLER=1) prints the stack, which names where.
Match NativeCrash(const std::string& text, const ExplainContext& c) {
  const int sig = c.unasked_signal;
  if (sig != SIGSEGV && sig != SIGBUS && sig != SIGILL && sig != SIGFPE && sig != SIGABRT) {
    return {};
  }
  const std::string name = SignalName(sig);
  if (auto m = Find(text, R"(terminate called after throwing an instance of '([^']+)'\s*\n\s*)"
                          R"(what\(\):\s*([^\n]*))")) {
    return Lines("the worker aborted (" + name +
                     ") on a C++ exception nothing caught: " + (*m)[1].str() + ": " + (*m)[2].str(),
                 "the exception's message says what failed; catch it where it is thrown or fix "
                 "its cause; gdb's 'catch throw' stops where it is thrown");
  }
  std::string cause = "the worker crashed in native code (" + name + ")";
  const size_t stack = text.rfind("(most recent call first):");
  if (stack != std::string::npos) {
    static const std::regex kFrame(R"rx(\n\s+File "([^"]+)", line (\d+) in ([^\n]+))rx");
    std::string innermost, own;
    for (std::sregex_iterator it(text.begin() + static_cast<long>(stack), text.end(), kFrame), end;
         it != end && own.empty(); ++it) {
      const std::string frame =
          (*it)[3].str() + " (" + (*it)[1].str() + ", line " + (*it)[2].str() + ")";
      if (innermost.empty()) innermost = frame;
      if (!LibraryFrame((*it)[1].str())) own = frame;
    }
    if (!innermost.empty()) cause += " under the Python call " + innermost;
    if (!own.empty() && own != innermost) cause += ", called from " + own;
  }
  if (sig == SIGBUS) {
    cause += "; a SIGBUS is often a mapped file or /dev/shm that ran out of space";
    if (c.shm_size_bytes) cause += " (/dev/shm is " + FormatBytes(*c.shm_size_bytes) + ")";
  }
  const bool traced = stack != std::string::npos;
  return Lines(cause,
               std::string(traced ? ""
                                  : "PYTHONFAULTHANDLER=1 prints each worker's Python stack "
                                    "at such a crash; ") +
                   "a C/C++/CUDA extension or a library built for another version of PyTorch, "
                   "CUDA or Python is the usual culprit; ulimit -c unlimited keeps a core dump "
                   "for gdb (bt)");
}

Match ModuleNotFound(const std::string& text, const ExplainContext& c) {
  auto module = QuotedAfter(text, "ModuleNotFoundError: No module named ");
  if (!module) return std::nullopt;
  const std::string top = module->substr(0, module->find('.'));
  return Lines("the workers' Python cannot import " + *module +
                   (c.interpreter.empty()
                        ? ""
                        : ": they ran " + c.interpreter + " (from " + c.interpreter_source + ")"),
               "install " + top +
                   " into that Python's environment, or run the workers under the Python that "
                   "has it: PYTHON_EXEC=/path/to/python, or the ddprun installed in that "
                   "environment");
}

// torch/csrc/distributed/c10d/reducer.cpp, Reducer::ensure_prior_reduction_finished.
Match UnusedParameters(const std::string& text, const ExplainContext&) {
  if (!Has(text, "Expected to have finished reduction in the prior iteration")) return {};
  auto names = Find(text, R"(Parameters which did not receive grad for rank (\d+): ([^\n]+))");
  auto indices =
      Find(text, R"(Parameter indices which did not receive grad for rank (\d+): ([\d ]+))");
  std::string which, rank = "?";
  if (names) which = (*names)[2].str(), rank = (*names)[1].str();
  if (indices) {
    std::string list = (*indices)[2].str();
    while (!list.empty() && list.back() == ' ') list.pop_back();
    which += (which.empty() ? "with indices " : " (indices ") + list + (names ? ")" : "");
    rank = (*indices)[1].str();
  }
  const std::string subject = which.empty() ? "some parameters" : "parameters " + which;
  if (Has(text, "not compatible with static_graph set to True")) {
    return Lines("DDP(static_graph=True) got no gradient for " + subject + " on rank " + rank +
                     ": the training graph changed between iterations",
                 "pass static_graph=False to DistributedDataParallel, or use the same "
                 "parameters in every iteration");
  }
  return Lines(
      "DDP got no gradient for " + subject + " on rank " + rank +
          " in the previous iteration: they took no part in producing the loss",
      "use them in the loss, freeze them (requires_grad_(False)) before wrapping the model, or "
      "pass find_unused_parameters=True to DistributedDataParallel" +
          std::string(names ? "" : "; TORCH_DISTRIBUTED_DEBUG=INFO names the parameters"));
}

// DDP's constructor compares the parameters' number and shapes across ranks
// (torch/csrc/distributed/c10d/reducer.cpp, verify_params_across_processes).
Match ModelMismatch(const std::string& text, const ExplainContext&) {
  const char* fix =
      "build the model the same way on every rank before DistributedDataParallel(model): the "
      "same configuration and code path, no layers that depend on the rank; DDP broadcasts "
      "rank 0's values, never its shapes";
  if (auto m = Find(text, R"(DDP expects same model across all ranks, but Rank (\d+) has (\d+) )"
                          R"(params, while rank (\d+) has inconsistent (\d+) params)")) {
    return Lines("the ranks built different models: rank " + (*m)[1].str() + " has " +
                     (*m)[2].str() + " parameters, rank " + (*m)[3].str() + " has " + (*m)[4].str(),
                 fix);
  }
  if (auto m = Find(text, R"(\[(\d+)\]: params\[(\d+)\] in this process with sizes (\[[^\]]*\]) )"
                          R"(appears not to match sizes of the same param in process (\d+))")) {
    return Lines("the ranks built different models: parameter " + (*m)[2].str() + " is " +
                     (*m)[3].str() + " on rank " + (*m)[1].str() + " and another shape on rank " +
                     (*m)[4].str(),
                 fix);
  }
  return {};
}

// torch/csrc/autograd/saved_variable.cpp, SavedVariable::unpack.
Match InplaceModified(const std::string& text, const ExplainContext&) {
  auto m =
      Find(text, R"(one of the variables needed for gradient computation has been modified by an )"
                 R"(inplace operation: (\[[^\]\[]+\[[^\]]*\]\])[^\n]*? is at version (\d+); )"
                 R"(expected version (\d+) instead)");
  if (!m) return {};
  return Lines("autograd saved the tensor " + (*m)[1].str() +
                   " for backward and it was changed in place before backward (version " +
                   (*m)[2].str() + ", expected " + (*m)[3].str() + ")",
               "update a buffer the forward used out of place (self.buf = self.buf * k) or "
               "after backward; torch.autograd.set_detect_anomaly(True) names the op; under "
               "DDP, broadcast_buffers=False where the ranks need not share buffers");
}

// ddprun's own verdict (supervisor/hang_check.cpp) on a worker that removed
// its heartbeat file and did not exit.
Match HungAtExit(const std::string& text, const ExplainContext&) {
  if (text.rfind("hung at exit: ", 0) != 0) return {};
  // ProcessGroupNCCL's destructor, when the group was never destroyed: 2.3-2.6, then 2.7 on.
  if (Has(text, "process group has NOT been destroyed before") ||
      Has(text, "destroy_process_group() was not called before program exit")) {
    return Lines(
        "the worker's program had finished but never destroyed its process group (PyTorch "
        "warned so): the group's teardown at exit waits, which NCCL needs every rank to do "
        "together",
        "call torch.distributed.destroy_process_group() on every rank at the end of the "
        "program; the dump's stacks show where it waits; the job is not restarted (that would "
        "run the finished program again)");
  }
  return Lines(
      "the worker's program had finished (it removed its heartbeat file) but its process "
      "did not exit: something in its exit waits (a process group's teardown, a thread "
      "that is not a daemon, a DataLoader worker, a CUDA or NCCL destructor)",
      "the dump's stacks show where it waits; call "
      "torch.distributed.destroy_process_group() on every rank before the end, join or "
      "daemonize threads; the job is not restarted (that would run the finished program "
      "again); --exit_timeout=0 waits for such an exit without a bound");
}

// torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the watchdog (WorkNCCL's operator<<).
Match CollectiveTimeout(const std::string& text, const ExplainContext&) {
  auto m = Find(text, R"(\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\()"
                      R"(SeqNum=(\d+), OpType=(\w+)[^)]*Timeout\(ms\)=(\d+)\))");
  if (!m) return {};
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

std::string VisibleDevices(const ExplainContext& c) {
  std::string s = c.visible_devices ? "CUDA_VISIBLE_DEVICES=" + *c.visible_devices
                                    : "CUDA_VISIBLE_DEVICES unset";
  if (c.visible_gpus >= 0) s += ", " + std::to_string(c.visible_gpus) + " GPU(s) visible";
  if (c.nproc_per_node > 0) s += ", --nproc_per_node=" + std::to_string(c.nproc_per_node);
  return s;
}

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

// A CUDA kernel's CUDA_KERNEL_ASSERT, as the device runtime prints it ("FILE:
// LINE: FUNC: block: [..], thread: [..] Assertion `COND` failed.") before
// PyTorch raises "device-side assert triggered"; the common conditions are
// an index out of range, said in plain words.
Match DeviceAssert(const std::string& text, const ExplainContext&) {
  if (!Has(text, "device-side assert triggered")) return {};
  auto m = Find(text, R"((\w+): block: \[[^\]]*\], thread: \[[^\]]*\] Assertion `([^`]+)` failed)");
  std::string cause = "a CUDA kernel's assertion failed";
  if (m) {
    const std::string cond = (*m)[2].str();
    cause += " (" + (*m)[1].str() + ": " + cond + ")";
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

// torch/csrc/distributed/c10d/socket.cpp (TCPStore's listen); Python's OSError.
Match AddressInUse(const std::string& text, const ExplainContext& c) {
  auto m =
      Find(text, R"(failed to listen on any local network address\. port: (\d+)[^\n]*EADDRINUSE)");
  if (!m && !Has(text, "[Errno 98] Address already in use")) return {};
  const std::string port = m ? (*m)[1].str() : "";
  std::string holder;
  if (m && c.port_holder) holder = c.port_holder(std::stoi(port));
  return Lines((port.empty() ? "a port" : "port " + port) +
                   " of this host is already in use (EADDRINUSE)" +
                   (holder.empty() ? "" : ": " + holder + " listens on it"),
               "give the job a free port (--master_port, or MASTER_PORT for a store the script "
               "starts itself), or stop what holds it; a job still running from before holds "
               "its port until it exits");
}

// torch/utils/data/dataloader.py, _MultiProcessingDataLoaderIter's worker check.
Match DataLoaderBusError(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"(DataLoader worker \(pid (\d+)\) is killed by signal: Bus error)");
  if (!m) return {};
  return Lines(
      "DataLoader worker pid " + (*m)[1].str() +
          " died of SIGBUS: batches pass through /dev/shm, which ran out" +
          (c.shm_size_bytes ? " (/dev/shm is " + FormatBytes(*c.shm_size_bytes) + ")" : ""),
      "enlarge /dev/shm: docker run --shm-size=8g (or --ipc=host), Kubernetes an "
      "emptyDir with medium Memory on /dev/shm; or fewer DataLoader num_workers or "
      "smaller batches");
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

// torch/distributed/distributed_c10d.py, _get_default_group.
Match NoProcessGroup(const std::string& text, const ExplainContext&) {
  if (!Has(text, "Default process group has not been initialized")) return {};
  return Lines("the worker called torch.distributed before init_process_group",
               "call torch.distributed.init_process_group(backend) in every worker first; "
               "ddprun sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE for its env:// default");
}

std::string NprocNumbers(const env::LimitFacts& f) {
  uint64_t threads = 0;
  for (const auto& p : f.user_processes) threads += p.threads;
  auto n = [](uint64_t v) {
    return v == env::kUnlimited ? std::string("unlimited") : std::to_string(v);
  };
  return "RLIMIT_NPROC of " + f.user + " is soft " + n(f.nproc.soft) + ", hard " + n(f.nproc.hard) +
         "; " + f.user + " runs " + std::to_string(threads) + " threads now";
}

// CPython's _thread ("can't start new thread"), glibc's EAGAIN from
// pthread_create and fork, as OpenBLAS, libgomp and os.fork report it.
Match ThreadLimit(const std::string& text, const ExplainContext& c) {
  const bool hit =
      Has(text, "can't start new thread") ||
      Find(text,
           R"((pthread_create|Thread creation|fork)[^\n]*Resource temporarily unavailable)") ||
      Has(text, "BlockingIOError: [Errno 11] Resource temporarily unavailable");
  if (!hit) return {};
  const std::string numbers = c.limits ? ": " + NprocNumbers(*c.limits) : "";
  const std::string user = c.limits ? c.limits->user : "USER";
  return Lines(
      "a worker could not start a thread or process (EAGAIN): the user's process and "
      "thread limit or the cgroup's pids.max is reached" +
          numbers,
      "raise the limit (ulimit -u N; for good, '" + user +
          " hard nproc N' in /etc/security/limits.d/90-nproc.conf), or start fewer "
          "threads: OMP_NUM_THREADS, DataLoader num_workers");
}

// What training scripts raise on a non-finite loss, and anomaly mode's check
// (torch/csrc/autograd/engine.cpp: "Function 'X' returned nan values").
Match NonFiniteLoss(const std::string& text, const ExplainContext&) {
  auto m = Find(text, R"((?:[Ll]oss|LOSS) (?:is|became|=) ?(nan|NaN|NAN|inf|-inf|Inf))");
  auto fn = Find(text, R"(Function '(\w+)' returned nan values in its (\d+)\w* output)");
  if (!m && !fn) return {};
  return Lines(m ? "the loss became " + (*m)[1].str()
                 : "autograd's " + (*fn)[1].str() + " returned nan in its output " + (*fn)[2].str(),
               "with AMP call scaler.unscale_(optimizer) before clip_grad_norm_; lower or warm up "
               "the learning rate; train in bf16 rather than fp16; "
               "torch.autograd.set_detect_anomaly(True) names the first op to make a nan");
}

// ENOSPC as libc's strerror, Python's OSError and errno names print it; or,
// with nothing printed (output redirected to that very filesystem), a log
// directory with no byte left: every write of the worker's output failed.
Match NoSpace(const std::string& text, const ExplainContext& c) {
  const bool said =
      Has(text, "No space left on device") || Has(text, "[Errno 28]") || Has(text, "ENOSPC");
  const bool logs_full = c.log_free_bytes && *c.log_free_bytes == 0;
  if (!said && !logs_full) return {};
  std::string cause = said ? "a worker's write found its filesystem full (ENOSPC)"
                           : "the filesystem of the job's log files is full: the workers' writes "
                             "to their redirected output fail (ENOSPC)";
  if (c.log_free_bytes) {
    cause += "; " + c.log_dir + " has " + FormatBytes(*c.log_free_bytes) + " free";
  }
  return Lines(cause,
               "free space there (df -h; checkpoints, caches and core files are the usual "
               "culprits), or give --log_dir (and the script's output paths) on a filesystem "
               "with room");
}

// Gloo's TCP device (gloo/transport/tcp/device.cc) names the interface, or
// the host name, it found no local address for; NCCL's bootstrap says "no
// socket interface found" (its last error, in PyTorch's DistBackendError).
// Both fail init_process_group on every rank of the host.
Match NetworkInterface(const std::string& text, const ExplainContext& c) {
  const std::string have = env::DescribeInterfaces(c.interfaces);
  if (auto m = Find(text, R"(Unable to find address for: ([^\n]*))")) {
    const std::string name = (*m)[1].str();
    auto problem = env::GlooIfnameProblem(name, c.interfaces);
    return Lines(
        "Gloo found no address on this host for " +
            (c.gloo_socket_ifname.empty() ? name : "GLOO_SOCKET_IFNAME=" + c.gloo_socket_ifname) +
            (problem ? ": " + *problem : ""),
        "set GLOO_SOCKET_IFNAME to interfaces of this host with an address (" + have +
            "), the ones other nodes reach it by, or unset it");
  }
  if (!Has(text, "no socket interface found")) return {};
  std::string cause = "NCCL found no network interface for its bootstrap";
  if (!c.nccl_socket_ifname.empty()) {
    cause += ": NCCL_SOCKET_IFNAME=" + c.nccl_socket_ifname;
    if (auto problem =
            env::NcclIfnameProblem(c.nccl_socket_ifname, c.nccl_socket_family, c.interfaces)) {
      cause += " selects none here: " + *problem;
    }
  }
  return Lines(cause,
               "set NCCL_SOCKET_IFNAME to a prefix of an interface of this host with an address (" +
                   have + "; =NAME for exactly NAME, ^NAME,... to exclude), or unset it");
}

// Gloo's full-mesh connect refused at the address a peer published in the
// store (gloo/transport/tcp/pair.cc). With every peer running, that address
// listens no more: it was the peer's in an earlier process group of the same
// name, whose keys PyTorch leaves in the store (pytorch/pytorch#55967).
Match StaleGroupAddress(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"(Gloo connectFullMesh failed with [^\n]*?Connection refused, )"
                      R"(remote=\[([^\]]+)\]:(\d+))");
  if (!m || !c.peers_running) return {};
  return Lines(
      "Gloo was refused at " + (*m)[1].str() + ":" + (*m)[2].str() +
          ", the address another rank published in the job's store, while every rank was "
          "running: it is an earlier process group's. A process group made again (init_process_"
          "group after destroy_process_group, or a group name used before) reads the earlier "
          "group's addresses, which PyTorch leaves in the store (pytorch/pytorch#55967)",
      "give each new process group keys of its own: init_process_group(backend, "
      "store=PrefixStore(f\"pg{n}/\", TCPStore(MASTER_ADDR, MASTER_PORT, is_master=False)), "
      "rank=RANK, world_size=WORLD_SIZE) with n counted alike on every rank; or keep one "
      "process group for the program's life");
}

const std::vector<Entry>& Catalogue() {
  static const std::vector<Entry> kEntries = {
      {"hung at exit", HungAtExit},
      {"out of memory (OOM killer)", OomKilled},
      {"module not found", ModuleNotFound},
      {"unused parameters", UnusedParameters},
      {"model differs across ranks", ModelMismatch},
      {"in-place modified tensor", InplaceModified},
      {"collective timeout", CollectiveTimeout},
      {"CUDA out of memory", CudaOutOfMemory},
      {"CUDA device-side assert", DeviceAssert},
      {"duplicate GPU", DuplicateGpu},
      {"invalid device ordinal", InvalidDeviceOrdinal},
      {"NCCL without a GPU", NcclWithoutGpu},
      {"address in use", AddressInUse},
      {"network interface", NetworkInterface},
      {"process group made again", StaleGroupAddress},
      {"DataLoader bus error", DataLoaderBusError},
      {"NCCL shared memory", NcclSharedMemory},
      {"process group not initialized", NoProcessGroup},
      {"thread limit", ThreadLimit},
      {"non-finite loss", NonFiniteLoss},
      {"no space left", NoSpace},
      {"native crash", NativeCrash},  // last: what the text names says more
  };
  return kEntries;
}

}  // namespace

std::optional<Explanation> Explain(const FailureRecord& failure, const ExplainContext& context) {
  const std::string text = TextOf(failure);
  for (const auto& entry : Catalogue()) {
    if (auto e = entry.match(text, context)) {
      e->signature = entry.signature;
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace ddprun::supervisor
