#include "env/worker_env.hpp"

#include <algorithm>
#include <cstdlib>

#include "base/parse.hpp"
#include "env/cpus.hpp"
#include "env/names.hpp"

namespace ddprun::env {

std::vector<std::string> SplitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::optional<std::string> VisibleDevices(const GroupInfo& group, const Environ& base) {
  if (group.gpus) return group.gpus;
  return Lookup(base, kCudaVisibleDevices);
}

namespace {

// torchrun's --virtual-local-rank: the i-th visible device, or "i" when the
// launcher had no CUDA_VISIBLE_DEVICES.
StatusOr<std::string> VirtualDevice(const GroupInfo& group, int local_rank, const Environ& base) {
  auto visible = VisibleDevices(group, base);
  if (!visible) return std::to_string(local_rank);
  auto devices = SplitList(*visible);
  if (local_rank >= static_cast<int>(devices.size())) {
    return InvalidArgument("--virtual_local_rank: local rank " + std::to_string(local_rank) +
                           " exceeds the " + std::to_string(devices.size()) +
                           " devices in CUDA_VISIBLE_DEVICES=" + *visible +
                           ": lower --nproc_per_node or list more devices");
  }
  return Trimmed(devices[local_rank]);  // as torchrun: " 1, 2" gives rank 1 "2"
}

// The SLURM_* variables that describe a task's place in its step, as Slurm
// would set them for worker `local_rank` started as a task of its own.
void RewriteSlurm(const GroupInfo& g, int local_rank, Environ& e) {
  const int rank = g.base_rank + local_rank;
  const std::string world = std::to_string(g.world_size);
  e[kSlurmProcId] = std::to_string(rank);
  e[kSlurmLocalId] = std::to_string(local_rank);
  e[kSlurmNodeId] = std::to_string(g.group_rank);
  for (const char* name : {kSlurmNtasks, kSlurmNprocs, kSlurmStepNumTasks}) e[name] = world;
  e[kSlurmNtasksPerNode] = std::to_string(g.local_world_size);
  std::string gtids;
  for (int r = g.base_rank; r < g.base_rank + g.local_world_size; ++r) {
    gtids += (gtids.empty() ? "" : ",") + std::to_string(r);
  }
  e[kSlurmGtids] = gtids;
  // The agent's task CPUs shared out, as srun -c would give each task: code
  // that sizes its threads or DataLoader workers by it would otherwise take
  // the whole share once per worker.
  if (auto cpus = Lookup(e, kSlurmCpusPerTask)) {
    char* end = nullptr;
    const long n = std::strtol(cpus->c_str(), &end, 10);
    if (!cpus->empty() && *end == '\0' && n > 0) {
      e[kSlurmCpusPerTask] = std::to_string(std::max(1L, n / std::max(1, g.local_world_size)));
    }
  }
  // "L(xN)" when every node runs L workers; otherwise the list is not known
  // here, and a wrong one is worse than none.
  const bool uniform = g.world_size == g.local_world_size * g.group_world_size;
  for (const char* name : {kSlurmTasksPerNode, kSlurmStepTasksPerNode}) {
    if (uniform) {
      e[name] = std::to_string(g.local_world_size) +
                (g.group_world_size > 1 ? "(x" + std::to_string(g.group_world_size) + ")" : "");
    } else {
      e.erase(name);
    }
  }
}

// --hang_detect=torch: the hook first on PYTHONPATH (the user's entries
// after it: it imports their own sitecustomize), and PyTorch's flight recorder
// on, dumping into the hook's directory, unless the user configured it.
void AddTorchHook(const GroupInfo& g, const WorkerFiles& files, Environ& e) {
  const auto path = Lookup(e, kPythonPath);
  e[kPythonPath] = g.torch_hook_dir + (path && !path->empty() ? ":" + *path : "");
  e[kTorchDir] = files.torch_dir;
  e.emplace(kFrBufferSize, "2000");
  e.emplace(kFrDumpTempFile, files.torch_dir + "/nccl_trace_rank_");
  e.emplace(kNcclDebugInfoPipeFile, files.torch_dir + "/pipe_");
  if (!g.nccl_ras_addr.empty()) e.emplace(kNcclRasAddr, g.nccl_ras_addr);
}

}  // namespace

StatusOr<Environ> WorkerEnviron(const GroupInfo& group, int local_rank, const WorkerFiles& files,
                                const Environ& base) {
  Environ e = base;
  const int rank = group.base_rank + local_rank;
  e[kLocalRank] = std::to_string(group.virtual_local_rank ? 0 : local_rank);
  e[kRank] = std::to_string(rank);
  e[kGroupRank] = std::to_string(group.group_rank);
  e[kRoleRank] = std::to_string(rank);
  e[kRoleName] = group.role;
  e[kLocalWorldSize] = std::to_string(group.local_world_size);
  e[kWorldSize] = std::to_string(group.world_size);
  e[kGroupWorldSize] = std::to_string(group.group_world_size);
  e[kRoleWorldSize] = std::to_string(group.world_size);
  e[kMasterAddr] = group.master_addr;
  e[kMasterPort] = std::to_string(group.master_port);
  e[kRestartCount] = std::to_string(group.restart_count);
  e[kMaxRestarts] = std::to_string(group.max_restarts);
  e[kRunId] = group.run_id;
  e[kUseAgentStore] = group.use_agent_store ? "True" : "False";
  e[kErrorFile] = files.error_file;
  e[kHeartbeatFile] = files.heartbeat_file;
  e[kTraceFile] = files.trace_file;
  e[kDumpDir] = files.dump_dir;
  e[kNcclAsyncErrorHandling] = Lookup(base, kNcclAsyncErrorHandling).value_or("1");
  if (group.local_world_size > 1 && !Lookup(base, kOmpNumThreads)) {
    e[kOmpNumThreads] =
        local_rank < static_cast<int>(group.bound_threads.size())
            ? std::to_string(group.bound_threads[static_cast<size_t>(local_rank)])
            : std::to_string(DefaultOmpThreads(group.allowed_cpus, group.local_world_size));
  }
  e[kSignalsToHandle] = group.signals_to_handle;
  if (!group.timer_file.empty()) e[kTimerFile] = group.timer_file;
  if (!group.torch_hook_dir.empty()) AddTorchHook(group, files, e);
  if (group.slurm_task) RewriteSlurm(group, local_rank, e);
  if (group.virtual_local_rank) {
    auto device = VirtualDevice(group, local_rank, base);
    if (!device.ok()) return device.status();
    e[kCudaVisibleDevices] = *device;
  } else if (group.gpus) {
    e[kCudaVisibleDevices] = *group.gpus;
  }
  return e;
}

}  // namespace ddprun::env
