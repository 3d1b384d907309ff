// Which of the host's GPUs the workers will see, and in which order: the
// devices CUDA will number 0, 1, ... in each worker, resolved against the
// inventory of env/gpus.hpp before any worker starts.
//
// The list comes from, in this order:
//   1. ddprun's --gpus (host indices or UUIDs; replaces CUDA_VISIBLE_DEVICES
//      for the workers); every entry must name a GPU of this host, once;
//   2. CUDA_VISIBLE_DEVICES, when set (also when empty: no GPU), read the way
//      CUDA reads it: indices, unique prefixes of GPU- or MIG- UUIDs; the
//      first entry that names no device ends the list (so "-1" hides every
//      GPU), and a device listed twice leaves none;
//   3. SLURM_STEP_GPUS, else SLURM_JOB_GPUS, when CUDA_VISIBLE_DEVICES is
//      unset: Slurm's global indices of the job's GPUs. Slurm sets
//      CUDA_VISIBLE_DEVICES itself wherever it binds GPUs, so this only
//      matters where something unset it; under a device cgroup the host shows
//      just the job's GPUs (renumbered from 0) and then all of them are meant;
//   4. else every GPU of the host.
//
// Pure functions of their inputs; thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/environ.hpp"
#include "env/gpus.hpp"

namespace ddprun::env {

enum class VisibleSource { kAll, kGpusOption, kCudaVisibleDevices, kSlurmStepGpus, kSlurmJobGpus };

struct VisibleGpu {
  int device = -1;  // index in the inventory; -1: a UUID that cannot be checked (no NVML UUIDs)
  std::optional<std::string> mig_uuid;  // the entry names this MIG instance of `device`
};

struct VisibleGpus {
  VisibleSource source = VisibleSource::kAll;
  std::string list;  // the list as given; "" for kAll
  // false when the host's GPUs are unknown (no NVML, no /proc list): then
  // `gpus` is empty and nothing was checked.
  bool checked = false;
  std::vector<VisibleGpu> gpus;  // as CUDA will number them in a worker
  // CUDA_VISIBLE_DEVICES to give every worker; nullopt: the launcher's, unchanged.
  std::optional<std::string> worker_devices;
  std::vector<std::string> warnings;  // for the launcher's log, once
};

// Resolves the visible set. Fails (kInvalidArgument) only for --gpus, when an
// entry names no GPU of this host or a GPU is listed twice; CUDA_VISIBLE_DEVICES
// and Slurm's lists are followed as CUDA and Slurm do, with a warning where
// entries are dropped. `gpus_option` must already be a syntactically valid list.
StatusOr<VisibleGpus> ResolveVisibleGpus(const std::optional<std::string>& gpus_option,
                                         const Environ& environ, const GpuInventory& inventory);

// Where the list came from, for messages: "--gpus=0,6,7",
// "CUDA_VISIBLE_DEVICES=0,1", "SLURM_STEP_GPUS=2,3" or "every GPU of the host".
std::string VisibleSourceText(const VisibleGpus& visible);

// How many GPUs the workers see: those checked, or none on a host without
// NVIDIA's driver; -1 when unknown (a driver that did not answer).
int GpusSeen(const VisibleGpus& visible, const GpuInventory& host);

// The PCI bus id (sysfs form) of the GPU local rank r uses, for r in
// [0, nproc_per_node): the r-th visible GPU (a worker's cuda:LOCAL_RANK, or its
// only device under --virtual_local_rank); nullopt where there is none or it
// is not known. A MIG instance gives its GPU's bus id. Visible GPUs beyond
// the ranks follow (no rank drives them): torchrun's exclusive binding splits
// a NUMA node's cores among all its visible GPUs.
std::vector<std::optional<std::string>> LocalRankBusIds(const VisibleGpus& visible,
                                                        const GpuInventory& inventory,
                                                        int nproc_per_node);

}  // namespace ddprun::env
