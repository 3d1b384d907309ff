// Resource limits before spawning: the per-user process/thread limit
// (RLIMIT_NPROC), open files, locked memory, /dev/shm and OpenMP threads,
// checked against what a job of `nproc_per_node` workers needs; and the size
// limits that fail a worker partway (file size, address space, data), whose
// soft values are raised to the hard ones and whose finite hard values are
// warned about.
//
// Two layers. PlanLimits() is pure: it takes numbers read from the OS
// (LimitFacts) and returns the checks and the soft limits to raise, so tests
// need no OS. ReadLimitFacts() reads those numbers (with injectable /proc,
// /sys and /dev/shm paths); PrepareLimits() reads, plans and applies the
// raises to this process, which the workers then inherit.
// Thread safety: PrepareLimits changes process-wide limits; call it from
// main before any worker starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "base/user_threads.hpp"
#include "env/environ.hpp"

namespace ddprun::env {

inline constexpr uint64_t kUnlimited = UINT64_MAX;  // RLIM_INFINITY

// ddprun's default for --threads_per_worker: a Python worker running PyTorch
// commonly holds dozens of threads (the OpenMP/MKL pool, autograd and CUDA
// threads, DataLoader pin-memory and worker processes, NCCL/Gloo progress and
// watchdog threads); 64 covers a typical training process.
inline constexpr int kDefaultThreadsPerWorker = 64;

// Threads beyond the workers' that a launch adds: ddprun's own, the shells
// and tools a job starts (ps, nvidia-smi, compilers).
inline constexpr uint64_t kNprocMargin = 32;
// The fds the launcher holds (stores, connections, event loops, the guardian)
// and each worker adds (pipes, --tee log files, its store connections):
// measured at 27 beside those inherited, and 2 a PyTorch worker (5 with
// --tee 3). Below the floor the launcher would run out partway (a store
// connection refused); below the comfortable value, a hang dump (py-spy's
// pipes, the reports it reads) or a burst of connections may.
inline constexpr uint64_t kNofileFloorBase = 28;
inline constexpr uint64_t kNofileFloorPerWorker = 5;
inline constexpr uint64_t kNofileBase = 48;
inline constexpr uint64_t kNofilePerWorker = 8;

struct Rlimit {
  uint64_t soft = kUnlimited;
  uint64_t hard = kUnlimited;
};

using ::ddprun::ProcessThreads;  // base/user_threads.hpp
using ::ddprun::UserProcesses;

// What the OS says, as plain numbers.
struct LimitFacts {
  uint32_t uid = 0;
  // In a user namespace uid 0 is not the kernel's root: RLIMIT_NPROC applies.
  bool user_namespace = false;                 // /proc/self/uid_map is not the identity
  std::string user;                            // login name, or the uid as text
  Rlimit nproc, nofile, memlock;               // getrlimit
  Rlimit fsize, address_space, data, stack;    // bytes
  Rlimit core;                                 // bytes: RLIMIT_CORE, ulimit -c
  std::vector<ProcessThreads> user_processes;  // processes whose real uid is `uid`
  uint64_t nr_open = 1048576;                  // /proc/sys/fs/nr_open: NOFILE's ceiling
  uint64_t open_fds = 0;                       // fds open in ddprun when it starts
  bool infiniband = false;                     // /sys/class/infiniband has devices
  std::optional<uint64_t> shm_free_bytes;      // statvfs(/dev/shm); none: no /dev/shm
  bool shm_read_only = false;                  // mounted ro: nothing can be made there
  bool shm_unlimited = false;                  // a tmpfs of size=0: no size limit
  std::optional<uint64_t> shm_inodes_free;     // none: the filesystem counts no inodes
  uint64_t nccl_buffsize = 4u << 20;           // NCCL_BUFFSIZE, NCCL's default 4 MiB
  int cpus = 1;
  std::optional<std::string> omp_num_threads;  // OMP_NUM_THREADS as set
  // The lowest cgroup v2 pids.max over this process's cgroup and those above
  // it (it counts every thread, root's too), where it is, and its pids.current.
  std::optional<uint64_t> pids_max;
  std::string pids_cgroup;  // "" without a cgroup v2 with the pids controller
  uint64_t pids_current = 0;
};

struct JobShape {
  int nproc_per_node = 1;
  int threads_per_worker = kDefaultThreadsPerWorker;
  int gpus = -1;  // GPUs the workers see; -1: unknown. None: NCCL's /dev/shm need is none
};

enum class CheckStatus { kOk, kWarn, kFail };
const char* CheckStatusName(CheckStatus s);  // "ok", "warn", "fail"

// One line of the doctor table; `fix` is empty when nothing needs doing.
struct LimitCheck {
  std::string check;  // "RLIMIT_NPROC (ulimit -u)"
  CheckStatus status = CheckStatus::kOk;
  std::string measured;
  std::string fix;
};

struct LimitPlan {
  std::vector<LimitCheck> checks;
  std::optional<uint64_t> raise_nproc_soft;  // new soft limit, when one is needed
  std::optional<uint64_t> raise_nofile_soft;
  std::optional<uint64_t> raise_fsize_soft;
  std::optional<uint64_t> raise_address_space_soft;
  std::optional<uint64_t> raise_data_soft;
  std::optional<uint64_t> raise_stack_soft;  // up to kStackWanted, not to the hard limit
  std::vector<std::string> notices;          // one line per raise, for the log
  std::vector<std::string> debug_notes;      // e.g. the skipped check for root
};

// The stack a worker's main thread gets, and each thread glibc starts
// (RLIMIT_STACK's soft limit): the usual default, 8 MiB. Below it PyTorch's
// import crashes (64 KiB: SIGSEGV); above it each thread maps more.
inline constexpr uint64_t kStackWanted = uint64_t{8} << 20;

// The checks and raises for `job` on a host described by `facts`.
LimitPlan PlanLimits(const LimitFacts& facts, const JobShape& job);

// The RLIMIT_NPROC failure as the launcher reports it: the numbers, the top
// thread-holding processes and the fixes. Empty when that check did not fail.
std::string NprocFailureMessage(const LimitFacts& facts, const JobShape& job);
// "" when RLIMIT_NOFILE's hard limit leaves the job enough fds; else why not.
std::string NofileFailureMessage(const LimitFacts& facts, const JobShape& job);

// Where ReadLimitFacts looks; tests point these at a fake tree.
struct OsPaths {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  std::string shm = "/dev/shm";
};

// This process's limits and the host facts, for the current real uid
// (env/limit_facts.cpp).
LimitFacts ReadLimitFacts(const Environ& environ, const OsPaths& paths = {});

// A count as the limit files and variables write it (0 to 999999999);
// nullopt for anything else.
std::optional<uint64_t> ParseCount(const std::string& s);

// Reads, plans and raises the soft limits that need raising. Fails with
// kUnavailable (before anything is spawned) when RLIMIT_NPROC's hard limit
// is too low for `job`; the message is NprocFailureMessage(). Warnings and
// notices come back in the plan for the caller to log.
StatusOr<LimitPlan> PrepareLimits(const JobShape& job, const Environ& environ,
                                  const OsPaths& paths = {});

}  // namespace ddprun::env
