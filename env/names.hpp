// Every environment variable in the launcher-worker contract, in one place.
//
// Workers get torchrun 2.x's set (see the man page's ENVIRONMENT) plus ddprun's own DDPRUN_* files;
// workers of ddprun's DDP core (ddp/) read two more; ddprun reads a few more for its own
// configuration. Every name here is documented in man/ddprun.1 (tests/e2e/test_docs.py checks).
#pragma once

namespace ddprun::env {

// Set for every worker, as torchrun sets them.
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kRank[] = "RANK";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";
inline constexpr char kNcclAsyncErrorHandling[] = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";
inline constexpr char kSignalsToHandle[] = "TORCHELASTIC_SIGNALS_TO_HANDLE";
inline constexpr char kCudaVisibleDevices[] = "CUDA_VISIBLE_DEVICES";
// Set only when the launcher has TORCHELASTIC_ENABLE_FILE_TIMER=1: the named
// pipe of its file timer server (supervisor/file_timer_server.hpp).
inline constexpr char kTimerFile[] = "TORCHELASTIC_TIMER_FILE";
// Read by the launcher only (env/cpus.hpp); passed to workers unchanged.
inline constexpr char kSlurmCpusOnNode[] = "SLURM_CPUS_ON_NODE";
// Read by the launcher only (env/visible_gpus.hpp) when CUDA_VISIBLE_DEVICES is unset.
inline constexpr char kSlurmStepGpus[] = "SLURM_STEP_GPUS";
inline constexpr char kSlurmJobGpus[] = "SLURM_JOB_GPUS";

// Set for every worker by ddprun, beyond torchrun's set ("" when logs go to
// /dev/null). See docs/flight-recorder.md.
inline constexpr char kHeartbeatFile[] = "DDPRUN_HEARTBEAT_FILE";
inline constexpr char kTraceFile[] = "DDPRUN_TRACE_FILE";
inline constexpr char kDumpDir[] = "DDPRUN_DUMP_DIR";
// Set only under --hang_detect=torch (python/ddprun_torch/sitecustomize.py): ddprun's hook
// directory is prepended to PYTHONPATH; the hook's files go to DDPRUN_TORCH_DIR; PyTorch's flight
// recorder is switched on and pointed there unless the launcher's environment sets it.
inline constexpr char kPythonPath[] = "PYTHONPATH";
inline constexpr char kTorchDir[] = "DDPRUN_TORCH_DIR";
inline constexpr char kFrBufferSize[] = "TORCH_FR_BUFFER_SIZE";
inline constexpr char kFrDumpTempFile[] = "TORCH_FR_DUMP_TEMP_FILE";
inline constexpr char kNcclDebugInfoPipeFile[] = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE";
// NCCL's RAS client socket (NCCL >= 2.24): one loopback port per job, unless set
// (supervisor/nccl_ras.hpp); NCCL_RAS_ENABLE=0 turns RAS off.
inline constexpr char kNcclRasAddr[] = "NCCL_RAS_ADDR";
// Read by ddprun: where its event log goes (launcher/machine_reports.hpp).
inline constexpr char kEventLog[] = "DDPRUN_EVENT_LOG";
inline constexpr char kNcclRasEnable[] = "NCCL_RAS_ENABLE";
// Read by ddprun to check them before the workers start (env/interfaces.hpp):
// the network interfaces Gloo and NCCL are told to use.
inline constexpr char kGlooSocketIfname[] = "GLOO_SOCKET_IFNAME";
inline constexpr char kNcclSocketIfname[] = "NCCL_SOCKET_IFNAME";
inline constexpr char kNcclSocketFamily[] = "NCCL_SOCKET_FAMILY";
inline constexpr char kNcclIbHca[] = "NCCL_IB_HCA";
// Marks every process of one ddprun run (inherited by the workers'
// descendants); supervisor/containment.hpp kills by it where no cgroup does.
inline constexpr char kProcessTree[] = "DDPRUN_PROCESS_TREE";

// Read by workers of ddprun's DDP core (ddp/process_group.cpp), which a user
// may set for them: the collective timeout in seconds (default 10 minutes), and
// the job token of the store at MASTER_ADDR:MASTER_PORT.
inline constexpr char kCollectiveTimeout[] = "DDPRUN_COLLECTIVE_TIMEOUT";
inline constexpr char kStoreToken[] = "DDPRUN_STORE_TOKEN";  // read by ddprun too

// Read by ddprun itself.
inline constexpr char kPythonExec[] = "PYTHON_EXEC";
inline constexpr char kLinePrefixTemplate[] = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";
inline constexpr char kShutdownTimeout[] = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
inline constexpr char kLogLevel[] = "LOGLEVEL";
inline constexpr char kPetPrefix[] = "PET_";
inline constexpr char kEnableFileTimer[] = "TORCHELASTIC_ENABLE_FILE_TIMER";  // "1": serve it
inline constexpr char kCgroup[] = "DDPRUN_CGROUP";  // 0: contain workers without a cgroup
inline constexpr char kSlurm[] = "PET_SLURM";       // --slurm

// Read by ddprun inside a Slurm job step (env/slurm.hpp): what the step is.
inline constexpr char kSlurmStepId[] = "SLURM_STEP_ID";  // set inside a job step only
inline constexpr char kSlurmJobId[] = "SLURM_JOB_ID";
inline constexpr char kSlurmJobIdOld[] = "SLURM_JOBID";
inline constexpr char kSlurmStepNumNodes[] = "SLURM_STEP_NUM_NODES";
inline constexpr char kSlurmNnodes[] = "SLURM_NNODES";
inline constexpr char kSlurmStepNumTasks[] = "SLURM_STEP_NUM_TASKS";
inline constexpr char kSlurmStepTasksPerNode[] = "SLURM_STEP_TASKS_PER_NODE";
inline constexpr char kSlurmTasksPerNode[] = "SLURM_TASKS_PER_NODE";
inline constexpr char kSlurmStepNodelist[] = "SLURM_STEP_NODELIST";
inline constexpr char kSlurmNodelist[] = "SLURM_JOB_NODELIST";
inline constexpr char kSlurmdNodename[] = "SLURMD_NODENAME";
inline constexpr char kSlurmRestartCount[] = "SLURM_RESTART_COUNT";
// Read from the agent's task, and rewritten for each worker to the worker's own
// rank, local rank, node and world (Lightning, submitit and others read them).
inline constexpr char kSlurmProcId[] = "SLURM_PROCID";
inline constexpr char kSlurmLocalId[] = "SLURM_LOCALID";
inline constexpr char kSlurmNodeId[] = "SLURM_NODEID";
inline constexpr char kSlurmNtasks[] = "SLURM_NTASKS";
inline constexpr char kSlurmNprocs[] = "SLURM_NPROCS";
inline constexpr char kSlurmNtasksPerNode[] = "SLURM_NTASKS_PER_NODE";
inline constexpr char kSlurmGtids[] = "SLURM_GTIDS";
inline constexpr char kSlurmCpusPerTask[] = "SLURM_CPUS_PER_TASK";
// A test hook: the NVML library to load instead of libnvidia-ml.so.1 (env/gpus.hpp).
inline constexpr char kNvmlLibrary[] = "DDPRUN_NVML_LIBRARY";

}  // namespace ddprun::env
