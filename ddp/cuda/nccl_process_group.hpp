// The GPU process group on NCCL, bootstrapped through the agent store.
//
// Set-up (keys under the attempt's key space "ddp/attempt_<restart>/nccl/"):
// every rank publishes "<hostname>/<PCI bus id of its current CUDA device>/
// <local rank>" and the group refuses two ranks of one host on one device
// (NCCL's own "Duplicate GPU detected" is obscure); then rank 0 makes the
// NCCL unique id and the others read it.
// REQUIRES: the caller made its device current (cudaSetDevice(LOCAL_RANK)).
//
// Collectives take device memory, run on the group's own CUDA stream after
// the work already on the legacy default stream, and complete when their
// CUDA event has fired. A watchdog thread checks the age of every collective
// in flight against timeout() and polls ncclCommGetAsyncError; on a timeout
// or an NCCL error it aborts the communicator (ncclCommAbort) and that
// collective, every one still pending and every later one fail with
// "ddp: allreduce #N (X MiB float32) on nccl timed out after S s: communicator aborted".
// Thread-safety: as ProcessGroup.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "ddp/process_group.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::ddp {

// Builds the group on `store` (a client connected to the agent store); the
// group keeps the client for AllGatherStrings.
StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(const LaunchEnv& env,
                                                               rendezvous::StoreClient store);

// Connects to the agent store at MASTER_ADDR:MASTER_PORT, then as above.
StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroupFromEnv(const LaunchEnv& env);

// The device check of the set-up, on what the ranks published ("<host>/<pci
// bus id>/<local rank>", in rank order): an error naming the first two local
// ranks sharing a device and what to do. `visible_devices` is this rank's
// CUDA_VISIBLE_DEVICES (nullptr when unset), quoted in the message.
Status CheckOneRankPerDevice(const std::vector<std::string>& published,
                             const char* visible_devices);

}  // namespace ddprun::ddp
