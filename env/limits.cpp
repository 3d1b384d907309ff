#include "env/limits.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <system_error>

#include "base/format.hpp"
#include "base/parse.hpp"
#include "env/cgroup.hpp"
#include "env/cpus.hpp"
#include "env/names.hpp"

namespace ddprun::env {

const char* CheckStatusName(CheckStatus s) {
  switch (s) {
    case CheckStatus::kOk:
      return "ok";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kFail:
      return "fail";
  }
  return "?";
}

namespace {

constexpr char kNprocCheck[] = "RLIMIT_NPROC (ulimit -u)";
constexpr char kNofileCheck[] = "RLIMIT_NOFILE (ulimit -n)";
constexpr char kMemlockCheck[] = "RLIMIT_MEMLOCK (ulimit -l)";
constexpr char kStackCheck[] = "RLIMIT_STACK (ulimit -s)";
constexpr char kShmCheck[] = "/dev/shm";
constexpr char kOmpCheck[] = "OMP_NUM_THREADS";
constexpr char kPidsCheck[] = "cgroup pids.max";
constexpr uint64_t kMiB = 1u << 20;

std::string Num(uint64_t n) { return n == kUnlimited ? "unlimited" : std::to_string(n); }

std::string MiB(uint64_t bytes) { return std::to_string((bytes + kMiB - 1) / kMiB) + " MiB"; }

uint64_t RoundUp(uint64_t n, uint64_t step) { return (n + step - 1) / step * step; }

uint64_t UserThreads(const LimitFacts& f) {
  uint64_t sum = 0;
  for (const auto& p : f.user_processes) sum += p.threads;
  return sum;
}

uint64_t JobThreads(const JobShape& job) {
  return static_cast<uint64_t>(job.nproc_per_node) * static_cast<uint64_t>(job.threads_per_worker);
}

// What the user runs plus what the job adds: the soft limit must reach it.
uint64_t NprocWanted(const LimitFacts& f, const JobShape& job) {
  return UserThreads(f) + JobThreads(job) + kNprocMargin;
}

std::string NprocNumbers(const LimitFacts& f, const JobShape& job) {
  return "soft " + Num(f.nproc.soft) + ", hard " + Num(f.nproc.hard) + ", in use " +
         std::to_string(UserThreads(f)) + " (threads of " + f.user + "), needed about " +
         std::to_string(JobThreads(job) + kNprocMargin) + " (" +
         std::to_string(job.nproc_per_node) + " workers x " +
         std::to_string(job.threads_per_worker) + " threads + " + std::to_string(kNprocMargin) +
         ")";
}

std::string NprocFix(const LimitFacts& f, const JobShape& job) {
  std::string n = std::to_string(RoundUp(NprocWanted(f, job), 1024));
  return "as root raise the hard limit: ulimit -u " + n +
         " in the shell that starts ddprun, or in /etc/security/limits.d/90-nproc.conf the "
         "lines \"" +
         f.user + " soft nproc " + n + "\" and \"" + f.user + " hard nproc " + n +
         "\" (then log in again); or lower --threads_per_worker if the workers use fewer threads";
}

void CheckNproc(const LimitFacts& f, const JobShape& job, LimitPlan& plan) {
  LimitCheck c{kNprocCheck, CheckStatus::kOk, NprocNumbers(f, job), ""};
  const uint64_t wanted = NprocWanted(f, job);
  if (f.uid == 0 && !f.user_namespace) {
    c.measured = "not enforced for root (uid 0); " + c.measured;
    plan.debug_notes.push_back(
        "RLIMIT_NPROC check skipped: the kernel does not enforce it for "
        "root (uid 0)");
  } else if (f.nproc.soft >= wanted) {
    // Enough already.
  } else if (f.nproc.hard >= wanted) {
    plan.raise_nproc_soft = f.nproc.hard;
    c.measured += "; soft raised to the hard limit " + Num(f.nproc.hard);
    plan.notices.push_back(
        "raised RLIMIT_NPROC (ulimit -u) soft limit from " + Num(f.nproc.soft) + " to " +
        Num(f.nproc.hard) + " (hard): " + std::to_string(UserThreads(f)) + " threads in use by " +
        f.user + ", the job needs about " + std::to_string(JobThreads(job) + kNprocMargin));
  } else {
    c.status = CheckStatus::kFail;
    c.fix = NprocFix(f, job);
  }
  plan.checks.push_back(std::move(c));
}

// A cgroup's pids.max counts every thread and process in it, root's too, and
// only whoever manages the cgroup raises it: a warning, never a refusal (the
// job's threads are an estimate).
void CheckPids(const LimitFacts& f, const JobShape& job, LimitPlan& plan) {
  LimitCheck c{kPidsCheck, CheckStatus::kOk, "", ""};
  if (!f.pids_max) {
    c.measured = f.pids_cgroup.empty() ? "no pids controller here: no limit"
                                       : "max (no limit) in " + f.pids_cgroup;
    plan.checks.push_back(std::move(c));
    return;
  }
  const uint64_t needed = JobThreads(job) + kNprocMargin;
  const uint64_t left = *f.pids_max > f.pids_current ? *f.pids_max - f.pids_current : 0;
  c.measured = Num(*f.pids_max) + " in " + f.pids_cgroup + ", " + std::to_string(f.pids_current) +
               " in use, the job needs about " + std::to_string(needed);
  if (left < needed) {
    c.status = CheckStatus::kWarn;
    c.fix =
        "have the cgroup's limit raised (docker run --pids-limit, the pod's pid limit, systemd "
        "TasksMax=, Slurm's cgroup.conf): ulimit does not lift it, nor does root; or lower "
        "--threads_per_worker if the workers use fewer threads, or run fewer workers";
  }
  plan.checks.push_back(std::move(c));
}

uint64_t NofileWanted(const LimitFacts& f, const JobShape& job) {
  return f.open_fds + kNofileBase + kNofilePerWorker * static_cast<uint64_t>(job.nproc_per_node);
}

uint64_t NofileFloor(const LimitFacts& f, const JobShape& job) {
  return f.open_fds + kNofileFloorBase +
         kNofileFloorPerWorker * static_cast<uint64_t>(job.nproc_per_node);
}

std::string NofileNeed(const LimitFacts& f, const JobShape& job) {
  return std::to_string(f.open_fds) + " open at start, the launcher needs at least " +
         std::to_string(NofileFloor(f, job)) + " (" + std::to_string(kNofileFloorBase) + " + " +
         std::to_string(job.nproc_per_node) + " workers x " +
         std::to_string(kNofileFloorPerWorker) + " + those open) and wants about " +
         std::to_string(NofileWanted(f, job)) + " (" + std::to_string(kNofileBase) + " + " +
         std::to_string(job.nproc_per_node) + " workers x " + std::to_string(kNofilePerWorker) +
         " + those open)";
}

std::string NofileFix(const LimitFacts& f, const JobShape& job) {
  const std::string n = std::to_string(RoundUp(NofileWanted(f, job), 1024));
  // Above the hard limit only root may go (the soft one ddprun raises itself).
  if (f.uid == 0 && !f.user_namespace) {
    return "raise it in the shell that starts ddprun: ulimit -n " + n;
  }
  return "as root raise the hard limit: \"" + f.user + " hard nofile " + n +
         "\" in /etc/security/limits.d/90-nofile.conf (then log in again), or ulimit -Hn " + n +
         " in a root shell that starts ddprun";
}

void CheckNofile(const LimitFacts& f, const JobShape& job, LimitPlan& plan) {
  // setrlimit refuses an unlimited NOFILE: the kernel's ceiling is fs.nr_open.
  const uint64_t target = std::min(f.nofile.hard, f.nr_open);
  LimitCheck c{kNofileCheck, CheckStatus::kOk,
               "soft " + Num(f.nofile.soft) + ", hard " + Num(f.nofile.hard), ""};
  if (!NofileFailureMessage(f, job).empty()) {
    c.status = CheckStatus::kFail;
    c.measured += "; " + NofileNeed(f, job);
    c.fix = NofileFix(f, job);
    plan.checks.push_back(std::move(c));
    return;
  }
  if (target < NofileWanted(f, job)) {
    // Enough to start and run; a hang dump or a burst of connections may not fit.
    c.status = CheckStatus::kWarn;
    c.measured += "; " + NofileNeed(f, job) +
                  ": a hang dump or a burst of store connections may run out of files";
    c.fix = NofileFix(f, job);
  }
  if (f.nofile.soft < target) {
    plan.raise_nofile_soft = target;
    c.measured += "; soft raised to " + Num(target);
    plan.notices.push_back("raised RLIMIT_NOFILE (ulimit -n) soft limit from " +
                           Num(f.nofile.soft) + " to " + Num(target));
  }
  plan.checks.push_back(std::move(c));
}

void CheckMemlock(const LimitFacts& f, LimitPlan& plan) {
  // NCCL registers its buffers with the InfiniBand HCA, which pins them: NCCL's
  // troubleshooting guide asks for an unlimited RLIMIT_MEMLOCK.
  LimitCheck c{kMemlockCheck, CheckStatus::kOk,
               "soft " + Num(f.memlock.soft) + ", hard " + Num(f.memlock.hard) + " bytes", ""};
  if (!f.infiniband) {
    c.measured += " (no InfiniBand devices: informational)";
  } else if (f.memlock.soft != kUnlimited) {
    c.status = CheckStatus::kWarn;
    c.measured += "; InfiniBand present and NCCL over IB needs unlimited";
    c.fix = "ulimit -l unlimited, or in /etc/security/limits.d/ \"" + f.user +
            " soft memlock unlimited\" and \"" + f.user + " hard memlock unlimited\"";
  }
  plan.checks.push_back(std::move(c));
}

// NCCL's SHM transport (used between local ranks when CUDA P2P is not) gives
// each ordered pair of ranks a shared-memory FIFO of NCCL_BUFFSIZE bytes
// (default 4 MiB, NCCL's environment documentation), in /dev/shm/nccl-*:
// about BUFFSIZE x n x (n-1) in all. Docker's default 64 MiB /dev/shm is the
// classic "failed to extend /dev/shm" case for 8 GPUs (224 MiB).
// A DataLoader with worker processes hands every batch over in /dev/shm; a
// batch of 256 images of 3x224x224 floats is 147 MiB. Docker's default is 64 MiB.
constexpr uint64_t kShmForBatches = 256 * kMiB;

void CheckShm(const LimitFacts& f, const JobShape& job, LimitPlan& plan) {
  const uint64_t n = static_cast<uint64_t>(job.nproc_per_node);
  const bool nccl = job.gpus != 0;  // no GPU visible: no NCCL
  const uint64_t needed = nccl ? f.nccl_buffsize * n * (n - 1) : 0;
  LimitCheck c{kShmCheck, CheckStatus::kOk, "", ""};
  const std::string users =
      "nothing can be made there (NCCL's shared memory, DataLoader workers' shared tensors, "
      "Python's multiprocessing locks)";
  const uint64_t size_mib = RoundUp(needed, 64 * kMiB) / kMiB;
  const std::string fix = "give /dev/shm at least " + MiB(needed) +
                          ": docker run --shm-size=" + std::to_string(size_mib) +
                          "m, or as root mount -o remount,size=" + std::to_string(size_mib) +
                          "m /dev/shm; or NCCL_SHM_DISABLE=1 (slower)";
  if (!f.shm_free_bytes) {
    c.measured = "missing; NCCL's shared-memory transport needs about " + MiB(needed);
    c.status = needed > 0 ? CheckStatus::kWarn : CheckStatus::kOk;
    if (needed > 0) c.fix = "mount a tmpfs on /dev/shm; or NCCL_SHM_DISABLE=1";
  } else if (f.shm_read_only) {
    c.status = CheckStatus::kWarn;
    c.measured = "mounted read-only: " + users;
    c.fix = "as root mount -o remount,rw /dev/shm (docker: drop --read-only's hold on it)";
  } else if (f.shm_inodes_free && *f.shm_inodes_free == 0) {
    c.status = CheckStatus::kWarn;
    c.measured = "no inode free (nr_inodes reached): " + users;
    c.fix =
        "remove stale files there (ls /dev/shm), or as root mount -o remount,nr_inodes=N "
        "/dev/shm";
  } else {
    c.measured = f.shm_unlimited ? std::string("no size limit (tmpfs size=0)")
                                 : MiB(*f.shm_free_bytes) + " free";
    if (!nccl) {
      c.measured += "; no GPU visible: NCCL's shared-memory transport is not used";
    } else {
      c.measured += ", NCCL's shared-memory transport needs about " + MiB(needed) + " for " +
                    std::to_string(n) + " local ranks";
    }
    if (!f.shm_unlimited && *f.shm_free_bytes < needed) {
      c.status = CheckStatus::kWarn;
      c.fix = fix;
    } else if (!f.shm_unlimited && *f.shm_free_bytes < kShmForBatches) {
      c.status = CheckStatus::kWarn;
      c.measured +=
          "; DataLoader workers (num_workers > 0) hand each batch over through "
          "/dev/shm: under " +
          MiB(kShmForBatches) +
          " a few batches fill it (\"unable to allocate shared memory\", a bus error)";
      c.fix =
          "docker run --ipc=host or --shm-size=8g (PyTorch's advice), a Kubernetes emptyDir "
          "with medium Memory on /dev/shm, or as root mount -o remount,size=8g /dev/shm; "
          "a job without DataLoader workers need not care";
    }
  }
  plan.checks.push_back(std::move(c));
}

void CheckOmp(const LimitFacts& f, const JobShape& job, LimitPlan& plan) {
  LimitCheck c{kOmpCheck, CheckStatus::kOk, "", ""};
  const uint64_t n = static_cast<uint64_t>(job.nproc_per_node);
  // OpenMP reads a list ("4,2") as the threads of each nesting level: the
  // first is the outer one's. libgomp skips blanks around each number.
  std::optional<uint64_t> threads;
  if (f.omp_num_threads) {
    const std::string& v = *f.omp_num_threads;
    threads = ParseCount(Trimmed(v.substr(0, v.find(','))));
    for (size_t at = v.find(','); threads && at != std::string::npos; at = v.find(',', at + 1)) {
      const size_t next = v.find(',', at + 1);
      const auto level =
          ParseCount(Trimmed(v.substr(at + 1, next == std::string::npos ? next : next - at - 1)));
      if (!level || *level == 0) threads.reset();
    }
  }
  // At one thread each, only more CPUs or fewer workers help.
  const auto more_cpus_or_fewer_workers = [&](uint64_t threads_each) {
    return "more CPUs for the job (under Slurm: srun -c " + std::to_string(n * threads_each) +
           "; taskset/cpuset: a wider mask) or fewer workers (--nproc_per_node)";
  };
  const bool workers_above_cpus = n > static_cast<uint64_t>(f.cpus);
  if (!f.omp_num_threads) {
    const int each = DefaultOmpThreads(f.cpus, job.nproc_per_node);
    c.measured = n > 1 ? "unset: each of the " + std::to_string(n) + " workers gets " +
                             std::to_string(each) + " of " + std::to_string(f.cpus) + " CPUs"
                       : "unset: the worker uses every core";
    if (workers_above_cpus) {
      // ddprun's 1 thread each still leaves more workers than CPUs to run them.
      c.status = CheckStatus::kWarn;
      c.measured += ": oversubscribed, more workers than CPUs";
      c.fix = more_cpus_or_fewer_workers(1);
    }
  } else if (!threads || *threads == 0) {
    c.measured = !threads ? "\"" + *f.omp_num_threads + "\" is not a thread count"
                          : "0 is no thread count: OpenMP rejects it (libgomp: \"Invalid "
                            "value\") and each worker then uses every CPU";
    c.status = CheckStatus::kWarn;
    // A count that fits; with more workers than CPUs, one each still oversubscribes.
    c.fix = workers_above_cpus
                ? "OMP_NUM_THREADS=1, and " + more_cpus_or_fewer_workers(1)
                : "OMP_NUM_THREADS=" + std::to_string(std::max<uint64_t>(1, f.cpus / n));
  } else {
    const uint64_t total = *threads * n;
    c.measured = *f.omp_num_threads + " x " + std::to_string(n) +
                 " workers = " + std::to_string(total) + " threads on " + std::to_string(f.cpus) +
                 " allowed CPUs";
    if (total > static_cast<uint64_t>(f.cpus)) {
      c.status = CheckStatus::kWarn;
      c.measured += ": oversubscribed";
      const uint64_t fits = std::max<uint64_t>(1, f.cpus / n);
      if (fits >= *threads) {
        c.fix = more_cpus_or_fewer_workers(*threads);
      } else if (workers_above_cpus) {  // one thread each still oversubscribes
        c.fix = "OMP_NUM_THREADS=1, and " + more_cpus_or_fewer_workers(1);
      } else {
        c.fix = "OMP_NUM_THREADS=" + std::to_string(fits);
      }
    }
  }
  plan.checks.push_back(std::move(c));
}

// A limit on size that a worker meets partway through a run, not at its
// start: the soft value is raised to the hard one (as Slurm's propagation of
// the submitting shell's soft limits, a login node's "ulimit -v", leaves it
// low); a finite hard value, which only root can raise, is a warning.
struct SizeLimit {
  const char* check;  // "RLIMIT_FSIZE (ulimit -f)"
  char flag;          // ulimit's: -H<flag>
  const char* item;   // limits.conf's
  const char* reach;  // what a worker meets at the limit, after "no worker can ..."
  const char* cap;    // "" or how to cap memory instead
};

constexpr SizeLimit kFsize{
    "RLIMIT_FSIZE (ulimit -f)", 'f', "fsize",
    "write a file larger than the hard limit: a checkpoint or log that grows past it fails "
    "(Python: [Errno 27] File too large; C and C++ programs die of SIGXFSZ), as do ddprun's "
    "log files",
    ""};
constexpr SizeLimit kAddressSpace{
    "RLIMIT_AS (ulimit -v)", 'v', "as",
    "map more address space than the hard limit, used or not: importing PyTorch alone maps "
    "several GiB (below that: failed to map segment from shared object), CUDA reserves far more "
    "than it allocates, and every thread's stack counts (can't start new thread)",
    "; to cap a job's memory use a cgroup (Slurm --mem, docker --memory), which counts memory "
    "in use, not address space"};
constexpr SizeLimit kData{
    "RLIMIT_DATA (ulimit -d)", 'd', "data",
    "hold more heap and private mappings than the hard limit: allocations past it fail "
    "(MemoryError, std::bad_alloc, Cannot allocate memory)",
    "; to cap a job's memory use a cgroup (Slurm --mem, docker --memory)"};

std::string Size(uint64_t bytes) { return bytes == kUnlimited ? "unlimited" : FormatBytes(bytes); }

void CheckSize(const LimitFacts& f, const Rlimit& r, const SizeLimit& k,
               std::optional<uint64_t>& raise, LimitPlan& plan) {
  LimitCheck c{k.check, CheckStatus::kOk, "soft " + Size(r.soft) + ", hard " + Size(r.hard), ""};
  if (r.soft < r.hard) {
    raise = r.hard;
    c.measured += "; soft raised to " + Size(r.hard);
    plan.notices.push_back(std::string("raised ") + k.check + " soft limit from " + Size(r.soft) +
                           " to " + Size(r.hard) + " (hard)");
  }
  if (r.hard != kUnlimited) {
    c.status = CheckStatus::kWarn;
    c.measured += ": no worker can " + std::string(k.reach);
    c.fix = std::string("as root raise the hard limit: ulimit -H") + k.flag +
            " unlimited in the shell that starts ddprun, or \"" + f.user + " hard " + k.item +
            " unlimited\" in /etc/security/limits.d/ (then log in again)" + k.cap;
  }
  plan.checks.push_back(std::move(c));
}

// A small soft stack limit (a login shell's ulimit -s, a site's profile)
// crashes PyTorch's import and deep recursion with SIGSEGV and no word: the
// soft limit is raised to the usual 8 MiB where the hard one allows, never
// beyond it (each of a worker's threads would map more).
void CheckStack(const LimitFacts& f, LimitPlan& plan) {
  LimitCheck c{kStackCheck, CheckStatus::kOk,
               "soft " + Size(f.stack.soft) + ", hard " + Size(f.stack.hard), ""};
  if (f.stack.soft < kStackWanted) {  // unlimited is kUnlimited, the largest
    const uint64_t target = std::min(f.stack.hard, kStackWanted);
    if (target > f.stack.soft) {
      plan.raise_stack_soft = target;
      c.measured += "; soft raised to " + Size(target);
      plan.notices.push_back("raised RLIMIT_STACK (ulimit -s) soft limit from " +
                             Size(f.stack.soft) + " to " + Size(target) +
                             ": below it PyTorch's import and deep recursion crash (SIGSEGV)");
    }
    if (target < kStackWanted) {
      c.status = CheckStatus::kWarn;
      c.measured += "; below the usual 8 MiB: PyTorch's import may crash (SIGSEGV)";
      c.fix =
          "as root raise the hard limit: ulimit -Hs 8192 in the shell that starts ddprun, or "
          "\"" +
          f.user + " hard stack 8192\" in /etc/security/limits.d/";
    }
  }
  plan.checks.push_back(std::move(c));
}

}  // namespace

LimitPlan PlanLimits(const LimitFacts& facts, const JobShape& job) {
  LimitPlan plan;
  CheckNproc(facts, job, plan);
  CheckPids(facts, job, plan);
  CheckNofile(facts, job, plan);
  CheckMemlock(facts, plan);
  CheckStack(facts, plan);
  CheckShm(facts, job, plan);
  CheckOmp(facts, job, plan);
  CheckSize(facts, facts.fsize, kFsize, plan.raise_fsize_soft, plan);
  CheckSize(facts, facts.address_space, kAddressSpace, plan.raise_address_space_soft, plan);
  CheckSize(facts, facts.data, kData, plan.raise_data_soft, plan);
  return plan;
}

std::string NprocFailureMessage(const LimitFacts& facts, const JobShape& job) {
  LimitPlan plan;
  CheckNproc(facts, job, plan);
  if (plan.checks[0].status != CheckStatus::kFail) return "";
  const std::vector<ProcessThreads> top = TopThreadHolders(facts.user_processes, 5);
  std::ostringstream o;
  o << "RLIMIT_NPROC (ulimit -u) is too low to start the workers: " << NprocNumbers(facts, job)
    << "; not starting any worker\n  top thread holders of " << facts.user << ":";
  for (const auto& p : top) {
    o << "\n    pid " << p.pid << ", " << p.threads << " threads: " << p.command;
  }
  if (top.empty()) o << " none";
  o << "\n  fix: " << NprocFix(facts, job);
  return o.str();
}

std::string NofileFailureMessage(const LimitFacts& facts, const JobShape& job) {
  if (std::min(facts.nofile.hard, facts.nr_open) >= NofileFloor(facts, job)) return "";
  return "RLIMIT_NOFILE (ulimit -n) is too low to run the job: hard limit " +
         Num(facts.nofile.hard) + " open files, " + NofileNeed(facts, job) +
         "; not starting any worker; fix: " + NofileFix(facts, job);
}

namespace {

Status SetSoft(int resource, const char* name, uint64_t soft) {
  rlimit r{};
  if (getrlimit(resource, &r) != 0) return ErrnoStatus(std::string("getrlimit ") + name, errno);
  r.rlim_cur = soft == kUnlimited ? RLIM_INFINITY : static_cast<rlim_t>(soft);
  if (setrlimit(resource, &r) != 0) {
    return ErrnoStatus(std::string("raise ") + name + " soft limit to " + Num(soft), errno);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LimitPlan> PrepareLimits(const JobShape& job, const Environ& environ,
                                  const OsPaths& paths) {
  const LimitFacts facts = ReadLimitFacts(environ, paths);
  LimitPlan plan = PlanLimits(facts, job);
  if (std::string failure = NprocFailureMessage(facts, job); !failure.empty()) {
    return Unavailable(failure);
  }
  if (std::string failure = NofileFailureMessage(facts, job); !failure.empty()) {
    return Unavailable(failure);
  }
  const struct {
    int resource;
    const char* name;
    const std::optional<uint64_t>& soft;
  } raises[] = {{RLIMIT_NPROC, "RLIMIT_NPROC", plan.raise_nproc_soft},
                {RLIMIT_NOFILE, "RLIMIT_NOFILE", plan.raise_nofile_soft},
                {RLIMIT_FSIZE, "RLIMIT_FSIZE", plan.raise_fsize_soft},
                {RLIMIT_AS, "RLIMIT_AS", plan.raise_address_space_soft},
                {RLIMIT_DATA, "RLIMIT_DATA", plan.raise_data_soft},
                {RLIMIT_STACK, "RLIMIT_STACK", plan.raise_stack_soft}};
  for (const auto& r : raises) {
    if (!r.soft) continue;
    if (Status s = SetSoft(r.resource, r.name, *r.soft); !s.ok()) return s;
  }
  return plan;
}

}  // namespace ddprun::env
