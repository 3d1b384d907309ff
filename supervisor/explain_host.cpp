#include "supervisor/explain_entries.hpp"

#include <csignal>
#include <string>

#include "base/format.hpp"
#include "base/user_threads.hpp"
#include "env/gloo_address.hpp"
#include "env/interfaces.hpp"
#include "supervisor/exit_status.hpp"

namespace ddprun::supervisor::explain {

// The kernel's OOM killer (env/memory.hpp): a worker, or a DataLoader worker
// of it, killed by a SIGKILL nobody in the job sent while the OOM kill count
// rose: it ran out of memory, its cgroup's or the host's.
Match OomKilled(const std::string& text, const ExplainContext& c) {
  // torch/utils/data/dataloader.py: a DataLoader worker dead of SIGKILL, or of
  // a signal it could not name ("exited unexpectedly").
  const bool loader = Has(text, "is killed by signal: Killed") ||
                      (Has(text, "DataLoader worker (pid") && Has(text, "exited unexpectedly"));
  if (!c.memory || (c.unasked_signal != SIGKILL && !loader)) return {};
  const env::MemoryFacts& m = *c.memory;
  const uint64_t in_cgroup = m.cgroup_oom_kills.value_or(0);
  const uint64_t on_host = m.host_oom_kills.value_or(0);
  if (in_cgroup == 0 && on_host == 0) return {};
  std::string cause = std::string(c.unasked_signal == SIGKILL
                                      ? "the worker died of SIGKILL, which ddprun did not send,"
                                      : "a DataLoader worker of it died") +
                      " and the kernel's OOM killer killed ";
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

namespace {

std::string SoftHard(const env::Rlimit& r);  // "soft 64.0 KiB, hard 64.0 KiB"

// faulthandler's "File "PATH", line N in FUNC" lines: a library's (the
// standard library, site-packages) or the program's own.
bool LibraryFrame(const std::string& path) {
  return path.find("/site-packages/") != std::string::npos ||
         path.find("/dist-packages/") != std::string::npos ||
         std::regex_search(path, std::regex(R"(/lib/python\d)"));
}

// No core file was found after a native crash: what the core-file limit (read
// as the failure is explained) allows.
std::string HowToKeepACore(const ExplainContext& c) {
  if (!c.limits || c.limits->core.soft == 0) {
    const bool capped = c.limits && c.limits->core.hard == 0;
    if (!capped) {
      const std::string most = !c.limits || c.limits->core.hard == env::kUnlimited
                                   ? "unlimited"
                                   : std::to_string(c.limits->core.hard);
      return "ulimit -c " + most + " keeps a core dump for gdb (bt)";
    }
    return "no core dump can be kept: the hard core-file limit is 0 (ulimit -Hc; have it raised: "
           "'" +
           c.limits->user +
           " hard core unlimited' in /etc/security/limits.d/, docker run --ulimit core=-1), or "
           "run one worker under gdb -ex run --args";
  }
  return "core dumps are allowed (ulimit -c " +
         (c.limits->core.soft == env::kUnlimited ? std::string("unlimited")
                                                 : std::to_string(c.limits->core.soft)) +
         ") but none was found: /proc/sys/kernel/core_pattern says where the kernel puts them "
         "(coredumpctl list when it is systemd-coredump)";
}

}  // namespace

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
  // A Python exception first (its traceback in the error file or the
  // output), then the abort on the way out: the exception is the failure.
  const size_t raised = text.rfind("Traceback (most recent call last):");
  if (sig == SIGABRT && raised != std::string::npos) {
    static const std::regex kRaised(R"(\n(?:\[rank\d+\]: )?([A-Za-z_][\w.]*): ([^\n]*))");
    std::smatch m;
    if (std::regex_search(text.begin() + static_cast<long>(raised), text.end(), m, kRaised)) {
      return Lines("the worker raised " + m[1].str() + ": " + m[2].str() +
                       ", then aborted (SIGABRT) on its way out, in native teardown (a process "
                       "group left to be torn down while its peers were gone): the exception is "
                       "the failure",
                   "the traceback says what failed; torch.distributed.destroy_process_group() "
                   "in a finally: block lets the worker exit with the exception's code");
    }
  }
  // std::terminate on a thread still running as the process ended: Gloo's
  // teardown at exit while its peers still used the process group (seen
  // with a rank whose program finished before theirs).
  if (sig == SIGABRT && c.peers_running &&
      Has(text, "terminate called without an active exception")) {
    return Lines(
        "the worker aborted (SIGABRT) as it exited (\"terminate called without an active "
        "exception\": a thread of it, such as its process group's, still ran), while "
        "every other rank still ran: it left the job first; if its program had "
        "finished, it ran fewer steps or collectives than its peers",
        "give every rank the same number of steps (DistributedSampler with "
        "drop_last=True, or DDP's join() for uneven inputs), and end every rank's "
        "program with a barrier and torch.distributed.destroy_process_group()");
  }
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
  // ddprun raised the soft stack limit to 8 MiB where the hard one let it: a
  // smaller one is what the worker ran with (64 KiB crashes import torch).
  if (sig == SIGSEGV && c.limits && c.limits->stack.soft < env::kStackWanted) {
    return Lines(cause + "; its stack limit is only " + FormatBytes(c.limits->stack.soft) +
                     " (RLIMIT_STACK, ulimit -s: " + SoftHard(c.limits->stack) +
                     "), under the usual 8 MiB: a deep native call overflows it",
                 "raise the hard stack limit to 8 MiB in the shell that starts ddprun (ulimit "
                 "-s 8192; above the hard limit only root may go, or '" +
                     c.limits->user +
                     " hard stack 8192' in /etc/security/limits.d/); if the "
                     "crash stays, a C/C++/CUDA extension is the usual culprit");
  }
  // A core file kept (core dump line of the report: "PATH (SIZE)"): gdb opens it.
  const std::string core = c.core_dump.empty() || c.core_dump.front() != '/'
                               ? ""
                               : c.core_dump.substr(0, c.core_dump.rfind(" ("));
  const std::string program = c.interpreter.empty() ? "PROGRAM" : c.interpreter;
  return Lines(cause,
               std::string(traced ? ""
                                  : "PYTHONFAULTHANDLER=1 prints each worker's Python stack "
                                    "at such a crash; ") +
                   "a C/C++/CUDA extension or a library built for another version of PyTorch, "
                   "CUDA or Python is the usual culprit; " +
                   (!core.empty() ? "gdb " + program + " " + core + ", then bt, shows the stack"
                    : c.core_dump.empty() ? HowToKeepACore(c)
                                          : "open its core dump (above) in gdb, then bt"));
}

// A worker whose program had finished (it removed its heartbeat file) and
// that then crashed on its way out: native teardown (a destructor, a thread
// still running as the interpreter ended: PyTorch 2.12's "terminate called
// without an active exception"). What the crash itself says comes after.
Match CrashedAtExit(const std::string& text, const ExplainContext& c) {
  if (c.crashed_at_exit_after < 0 || c.unasked_signal == 0) return {};
  const std::string when = c.crashed_at_exit_after < 0.05
                               ? "just before"
                               : FormatSeconds(c.crashed_at_exit_after) + " s before";
  std::string cause = "the worker's program had finished (it removed its heartbeat file " + when +
                      ") and its process died of " + SignalName(c.unasked_signal) +
                      " on its way out, in native teardown (a destructor, or a thread still "
                      "running as the process ended)";
  std::string fix = "the job is not restarted (that would run the finished program again); ";
  const Match native = NativeCrash(text, c);
  if (Has(text, "terminate called without an active exception")) {
    cause += ": \"terminate called without an active exception\"";
  } else if (native && native->cause != "the worker crashed in native code (" +
                                            SignalName(c.unasked_signal) + ")") {
    cause += "; " + native->cause;
  }
  fix += native && !native->fix.empty()
             ? native->fix
             : "its last output lines show where (PYTHONFAULTHANDLER=1 prints the stacks)";
  return Lines(cause, fix + "; " +
                          (c.interpreter.empty() ? "a process group destroyed"
                                                 : "torch.distributed.destroy_process_group()") +
                          " on every rank and threads joined before the end leave less to tear "
                          "down");
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

namespace {

constexpr char kEnlargeShm[] =
    "enlarge /dev/shm: docker run --shm-size=8g (or --ipc=host), Kubernetes an emptyDir with "
    "medium Memory on /dev/shm; or fewer DataLoader num_workers or smaller batches";

std::string ShmSize(const ExplainContext& c) {
  return c.shm_size_bytes ? " (/dev/shm is " + FormatBytes(*c.shm_size_bytes) + ")" : "";
}

}  // namespace

// torch/utils/data/dataloader.py, _MultiProcessingDataLoaderIter's worker check.
Match DataLoaderBusError(const std::string& text, const ExplainContext& c) {
  auto m = Find(text, R"(DataLoader worker \(pid (\d+)\) is killed by signal: Bus error)");
  if (!m) return {};
  return Lines("DataLoader worker pid " + (*m)[1].str() +
                   " died of SIGBUS: batches pass through /dev/shm, which ran out" + ShmSize(c),
               kEnlargeShm);
}

// PyTorch's shared-memory allocator (libshm; the file_descriptor and
// file_system sharing strategies) making the segment for a tensor a
// DataLoader worker or a torch.multiprocessing child hands over, in /dev/shm:
// "unable to allocate shared memory(shm) for file </torch_N_M_0>: No space
// left on device (28)"; older versions "unable to write to file </torch_...>".
Match SharedMemoryFull(const std::string& text, const ExplainContext& c) {
  auto m = Find(
      text, R"(unable to (?:allocate shared memory\(shm\) for|write to) file <(/?torch_[^>]*)>: )"
            R"(No space left on device)");
  if (!m) return {};
  return Lines(
      "a tensor passed between processes (a DataLoader worker's batch) found /dev/shm "
      "full: PyTorch could not make its segment " +
          (*m)[1].str() + " there (ENOSPC)" + ShmSize(c),
      kEnlargeShm);
}

namespace {

std::string NprocNumbers(const env::LimitFacts& f) {
  uint64_t threads = 0;
  for (const auto& p : f.user_processes) threads += p.threads;
  auto n = [](uint64_t v) {
    return v == env::kUnlimited ? std::string("unlimited") : std::to_string(v);
  };
  std::string most;  // read once the workers were stopped: what still holds threads
  for (const ProcessThreads& p : TopThreadHolders(f.user_processes, 3)) {
    most += (most.empty() ? " (the most: pid " : ", pid ") + std::to_string(p.pid) + " " +
            p.command + ": " + std::to_string(p.threads);
  }
  return "RLIMIT_NPROC of " + f.user + " is soft " + n(f.nproc.soft) + ", hard " + n(f.nproc.hard) +
         "; " + f.user + " runs " + std::to_string(threads) + " threads now" +
         (most.empty() ? "" : most + ")");
}

}  // namespace

// CPython's _thread ("can't start new thread"), glibc's EAGAIN from
// pthread_create and fork, as OpenBLAS, libgomp and os.fork report it, and
// ddprun's own fork of a worker (supervisor/spawn.cpp).
namespace {

bool NoThreadSaid(const std::string& text) {
  return Has(text, "can't start new thread") ||
         Find(text,
              R"((pthread_create|Thread creation|fork)[^\n]*Resource temporarily unavailable)") ||
         Has(text, "BlockingIOError: [Errno 11] Resource temporarily unavailable") ||
         Has(text, "fork failed with EAGAIN") ||
         Has(text, "a thread could not be started: this user runs");  // base/no_thread.hpp
}

}  // namespace

Match ThreadLimit(const std::string& text, const ExplainContext& c) {
  // Or a child of the rank's said it, and the rank raised that its child died
  // (PyTorch's DataLoader: "DataLoader worker (pid(s) ...) exited unexpectedly").
  const bool hit =
      NoThreadSaid(text) || (Has(text, "exited unexpectedly") && NoThreadSaid(c.output_tail));
  if (!hit) return {};
  // Root outside a user namespace has no RLIMIT_NPROC: only the cgroup's limit holds.
  const bool nproc_applies = !c.limits || c.limits->uid != 0 || c.limits->user_namespace;
  const std::string numbers = c.limits && nproc_applies ? ": " + NprocNumbers(*c.limits) : "";
  const std::string user = c.limits ? c.limits->user : "USER";
  if (c.limits && c.limits->pids_max) {
    const env::LimitFacts& l = *c.limits;
    return Lines("a worker could not start a thread or process (EAGAIN): the cgroup's pids.max (" +
                     std::to_string(*l.pids_max) + " in " + l.pids_cgroup + ", " +
                     std::to_string(l.pids_current) +
                     " in use now) counts every thread of the job, root's too" +
                     (nproc_applies ? "; or the user's limit" + numbers : std::string()),
                 "have the cgroup's limit raised (docker run --pids-limit, the pod's pid limit, "
                 "systemd TasksMax=, Slurm's cgroup.conf; ulimit does not lift it), or start "
                 "fewer threads: OMP_NUM_THREADS, DataLoader num_workers");
  }
  // A cap on the address space can leave no room for a thread's stack too.
  const std::string as = c.limits && c.limits->address_space.soft != env::kUnlimited
                             ? " (or RLIMIT_AS, ulimit -v, " + SoftHard(c.limits->address_space) +
                                   ", left no room for the thread's stack)"
                             : "";
  return Lines(
      "a worker could not start a thread or process (EAGAIN): the user's process and "
      "thread limit or the cgroup's pids.max is reached" +
          numbers + as,
      "raise the limit (ulimit -u N; for good, '" + user +
          " hard nproc N' in /etc/security/limits.d/90-nproc.conf), or start fewer "
          "threads: OMP_NUM_THREADS, DataLoader num_workers");
}

// ENOSPC as libc's strerror, Python's OSError and errno names print it; or,
// with nothing printed, a worker that wrote its output straight into a log
// directory with no byte left: every write of its output failed. (Where
// ddprun writes the log files, a full disk fails ddprun's writes, reported
// as such, not the worker's.)
Match NoSpace(const std::string& text, const ExplainContext& c) {
  const bool said =
      Has(text, "No space left on device") || Has(text, "[Errno 28]") || Has(text, "ENOSPC");
  const bool logs_full = c.writes_own_logs && c.log_free_bytes && *c.log_free_bytes == 0;
  if (!said && !logs_full) return {};
  std::string cause = said ? "a worker's write found its filesystem full (ENOSPC)"
                           : "the filesystem of the job's log files is full: the workers' writes "
                             "to their redirected output fail (ENOSPC)";
  const bool logs_have_room = said && c.log_free_bytes && *c.log_free_bytes > 0;
  if (c.log_free_bytes) {
    cause += "; " + c.log_dir + " has " + FormatBytes(*c.log_free_bytes) + " free" +
             (logs_have_room ? ", so the full one is another" : "");
  }
  return Lines(cause, logs_have_room
                          ? "df -h shows which filesystem is full (the script's output paths, "
                            "/tmp, /dev/shm; a stream sent to /dev/full fails the same way); "
                            "free space there or write elsewhere"
                          : "free space there (df -h; checkpoints, caches and core files are the "
                            "usual culprits), or give --log_dir (and the script's output paths) "
                            "on a filesystem with room");
}

namespace {

std::string Size(uint64_t bytes) {
  return bytes == env::kUnlimited ? std::string("unlimited") : FormatBytes(bytes);
}

std::string SoftHard(const env::Rlimit& r) {
  return "soft " + Size(r.soft) + ", hard " + Size(r.hard);
}

}  // namespace

// EFBIG, as strerror, Python's OSError and errno names print it, or a death
// by SIGXFSZ (what a C or C++ program gets; Python ignores the signal and
// sees EFBIG): a write past RLIMIT_FSIZE, or past the largest file the
// filesystem holds when no limit is set.
Match FileTooLarge(const std::string& text, const ExplainContext& c) {
  const bool signal = c.unasked_signal == SIGXFSZ;
  if (!signal && !Has(text, "File too large") && !Has(text, "[Errno 27]") && !Has(text, "EFBIG")) {
    return {};
  }
  const std::string what = signal ? "the worker died of SIGXFSZ: a write of it went past "
                                  : "a worker's write went past ";
  if (c.limits && c.limits->fsize.hard == env::kUnlimited) {
    return Lines(what +
                     "the largest file its filesystem holds (EFBIG; FAT32, for one, stops at 4 "
                     "GiB), with no file size limit set",
                 "write that file to another filesystem (df -T shows each one's type), or in "
                 "parts");
  }
  const std::string user = c.limits ? c.limits->user : "USER";
  return Lines(what + "the file size limit (RLIMIT_FSIZE, ulimit -f" +
                   (c.limits ? ": " + SoftHard(c.limits->fsize) : std::string()) + ")",
               "as root raise the hard limit: ulimit -Hf unlimited in the shell that starts "
               "ddprun, or \"" +
                   user + " hard fsize unlimited\" in /etc/security/limits.d/");
}

// EMFILE and ENFILE as strerror, Python's OSError and errno names print
// them: the process's open-file limit (RLIMIT_NOFILE), or the system's table.
Match TooManyOpenFiles(const std::string& text, const ExplainContext& c) {
  const bool system =
      Has(text, "Too many open files in system") || Has(text, "[Errno 23]") || Has(text, "ENFILE");
  const bool process = Find(text, R"(Too many open files(?! in system))") ||
                       Has(text, "[Errno 24]") || Has(text, "EMFILE");
  if (!system && !process) return {};
  if (!process) {
    return Lines("a worker found the system's table of open files full (ENFILE, fs.file-max)",
                 "find what holds so many (lsof | awk '{print $2}' | sort | uniq -c | sort -n | "
                 "tail), or as root raise it: sysctl -w fs.file-max=N");
  }
  auto count = [](uint64_t n) {
    return n == env::kUnlimited ? std::string("unlimited") : std::to_string(n);
  };
  const std::string user = c.limits ? c.limits->user : "USER";
  return Lines(
      "a worker opened more files than its open-file limit allows (EMFILE, RLIMIT_NOFILE" +
          (c.limits ? ": soft " + count(c.limits->nofile.soft) + ", hard " +
                          count(c.limits->nofile.hard) +
                          "; ddprun raises the workers' soft limit to the hard one"
                    : std::string()) +
          ")",
      "close what the program leaves open (files, sockets, DataLoader workers' shared tensors, "
      "one descriptor each under PyTorch's default sharing strategy: "
      "torch.multiprocessing.set_sharing_strategy('file_system') holds none), or as "
      "root raise the hard limit: ulimit -Hn N in the shell that starts ddprun, or \"" +
          user + " hard nofile N\" in /etc/security/limits.d/");
}

// torch.save's zip writer (caffe2/serialize/inline_container.cc) checks its
// position after each write and reports a short one without the errno:
// "unexpected pos N vs M" (PyTorch 2.x), "PytorchStreamWriter failed writing
// file" (older ones). A full filesystem, a quota or the file size limit.
Match CheckpointShortWrite(const std::string& text, const ExplainContext& c) {
  if (!Find(text, R"(inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+)") &&
      !Has(text, "PytorchStreamWriter failed writing file")) {
    return {};
  }
  const std::string what =
      "torch.save wrote less than the whole file (PyTorch's zip writer says so as \"unexpected "
      "pos\" or \"failed writing file\", without the system's reason): ";
  if (c.limits && c.limits->fsize.hard != env::kUnlimited) {
    const std::string user = c.limits->user;
    return Lines(what + "the file size limit (RLIMIT_FSIZE, ulimit -f: " +
                     SoftHard(c.limits->fsize) + ") or a full filesystem",
                 "raise the limit (as root: ulimit -Hf unlimited, or \"" + user +
                     " hard fsize unlimited\" in /etc/security/limits.d/); df -h and quota -s "
                     "show the space left where the checkpoint goes");
  }
  return Lines(what + "with no file size limit set, its filesystem was full or over quota",
               "free space where the checkpoint goes (df -h, quota -s), or save it to a "
               "filesystem with room");
}

// What a worker says when it gets no more address space: the dynamic loader
// mapping a library (import torch), malloc, Python, C++, thread stacks, the
// CUDA runtime. Only with a finite RLIMIT_AS or RLIMIT_DATA, and then named
// as what it measurably is: a failure to get memory under that cap.
Match AddressSpaceLimit(const std::string& text, const ExplainContext& c) {
  if (!c.limits) return {};
  const env::LimitFacts& f = *c.limits;
  const bool as = f.address_space.hard != env::kUnlimited;
  if (!as && f.data.hard == env::kUnlimited) return {};
  // A pattern and the words that name it; MemoryError alone, not
  // torch.OutOfMemoryError (a GPU's, explained by its own entry).
  static const struct {
    const char* pattern;
    const char* said;
    bool thread;  // a thread that could not start: the thread limit's too
  } kSymptoms[] = {
      {"failed to map segment from shared object", "failed to map segment from shared object",
       false},
      {"Cannot allocate memory", "Cannot allocate memory", false},
      {R"(\[Errno 12\])", "[Errno 12]", false},
      {R"((^|[^\w.])MemoryError)", "MemoryError", false},
      {"std::bad_alloc", "std::bad_alloc", false},
      {"can't start new thread", "can't start new thread", true},
      {"a thread could not be started: RLIMIT_AS", "no room for a thread's stack", true},
      {"CUDA error: out of memory", "CUDA error: out of memory", false},
      {"cudaErrorMemoryAllocation", "cudaErrorMemoryAllocation", false}};
  const char* said = nullptr;
  bool thread = false;
  for (const auto& s : kSymptoms) {
    if (Find(text, s.pattern)) {
      said = s.said;
      thread = s.thread;
      break;
    }
  }
  if (said == nullptr) return {};
  // A thread that did not start under a roomy cap (a thread's stack is 8 MiB)
  // where the user's thread limit holds: that limit, most likely (ThreadLimit).
  constexpr uint64_t kRoomy = uint64_t{4} << 30;
  const bool nproc_applies = (f.uid != 0 || f.user_namespace) && f.nproc.soft != env::kUnlimited;
  if (thread && nproc_applies && (!as || f.address_space.soft >= kRoomy)) return {};
  const std::string limit = as ? "RLIMIT_AS (ulimit -v), " + SoftHard(f.address_space)
                               : "RLIMIT_DATA (ulimit -d), " + SoftHard(f.data);
  return Lines("a worker could not get memory (" + std::string(said) +
                   ") under a cap on its address space: " + limit +
                   "; PyTorch maps several GiB at import, CUDA far more than it allocates",
               std::string("as root raise the hard limit: ulimit -H") + (as ? "v" : "d") +
                   " unlimited in the shell that starts ddprun, or \"" + f.user + " hard " +
                   (as ? "as" : "data") +
                   " unlimited\" in /etc/security/limits.d/; to cap memory use a cgroup (Slurm "
                   "--mem, docker --memory)");
}

// A Gloo connect to a peer's loopback address (gloo/transport/tcp: "timed out
// connecting: SO_ERROR: Connection refused, remote=[127.0.1.1]:PORT"; older
// gloo "connect [127.0.1.1]:PORT: Connection refused"): that peer, on another
// node, advertised the address of its host name (env/gloo_address.hpp).
Match GlooLoopbackPeer(const std::string& text, const ExplainContext& c) {
  if (!c.multi_node) return {};  // on one node loopback reaches every peer
  auto m = Find(text, R"((?:remote=\[|connect \[)(127\.\d+\.\d+\.\d+|::1)\])");
  if (!m) return {};
  const std::string address = (*m)[1].str();
  const std::string choices = env::GlooIfnameChoices(c.interfaces);
  const bool unset = c.gloo_socket_ifname.size() <= 1;
  return Lines("a rank's Gloo could not connect to a peer at " + address +
                   ", a loopback address: " +
                   (unset ? "with GLOO_SOCKET_IFNAME unset, the peer's Gloo told the others "
                            "the address its host name resolves to, and on its node that name "
                            "maps to loopback (Debian's /etc/hosts: 127.0.1.1 HOSTNAME)"
                          : "the peer's GLOO_SOCKET_IFNAME=" + c.gloo_socket_ifname +
                                " chose its loopback interface"),
               "export GLOO_SOCKET_IFNAME to the interface the nodes reach each other by, on "
               "every node before ddprun (it passes it on)" +
                   (choices.empty() ? std::string() : "; here: " + choices) +
                   "; or map each host name to its network address in /etc/hosts; ddprun "
                   "warns at start on a node whose host name maps to loopback");
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

}  // namespace ddprun::supervisor::explain
