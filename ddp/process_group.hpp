// A process group: the ranks of one job and the collectives among them.
//
// Collectives are asynchronous and run in the order they are issued (one
// worker thread per group), so a caller can keep computing while a bucket is
// reduced. Every collective has a deadline (default 10 minutes, as PyTorch's
// NCCL default; DDPRUN_COLLECTIVE_TIMEOUT=<seconds> or set_timeout()); a
// collective past it fails with a message naming the operation, its sequence
// number, its size and how long it waited, and the group is then broken:
// every later collective fails at once (the communicator is aborted).
//
// Every collective is recorded in the flight recorder when one is attached
// (DDPRUN_TRACE_FILE), so a supervisor can see where a stuck rank is.
//
// Thread-safety: issue collectives from one thread; Work may be waited on
// from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "ddp/tensor.hpp"

namespace ddprun::ddp {

enum class ReduceOp { kSum, kMax };

// The completion of one collective.
class Work {
 public:
  // Blocks until the collective finished; its status.
  Status Wait();
  // Orders the caller's later work after the collective. A device group
  // (NCCL) does it without blocking the host: the legacy default stream waits
  // for the collective, and the status is the group's as known now (a
  // failure shows here or at a later collective). Host groups: Wait().
  Status Synchronize();
  bool Done();
  void Complete(Status s);  // called by the group's worker thread
  // Set by a device group before the Work is returned: what Synchronize()
  // does while the collective is still running.
  void set_stream_wait(std::function<Status()> f) { stream_wait_ = std::move(f); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::function<Status()> stream_wait_;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  const char* backend() const { return backend_; }

  // In place, on every rank's `t` (same count and dtype everywhere).
  virtual std::shared_ptr<Work> AllReduce(TensorView t, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> Broadcast(TensorView t, int root) = 0;
  // Every rank's string, in rank order (through the store; for set-up checks).
  virtual StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& mine) = 0;

  // The number of collectives issued so far (the next one's sequence number).
  virtual uint64_t sequence() const = 0;

  // Records the next collective (number sequence()) in the flight recorder
  // as entered before it is issued, for a wrapper that waits first (the
  // TORCH_DISTRIBUTED_DEBUG=DETAIL check): a hang dump then shows this rank
  // waiting in it, not between collectives. Issuing it keeps that record.
  virtual void Entering(const char* op, const TensorView& t) {
    (void)op;
    (void)t;
  }

 protected:
  ProcessGroup(int rank, int size, const char* backend)
      : rank_(rank), size_(size), backend_(backend) {}

  int rank_;
  int size_;
  const char* backend_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};
};

// What ddprun gives a worker, read from the environment.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::string store_token;
  std::string trace_file;      // DDPRUN_TRACE_FILE ("" = no flight recorder)
  std::string heartbeat_file;  // DDPRUN_HEARTBEAT_FILE ("" = none)
};

// How long a worker tries to reach the agent's store: the collective timeout, as
// PyTorch's TCPStore client connects within its process group's, and at most 60 s
// (ddprun's store is up before any worker starts). A fixed 60 s made
// --collective-timeout 2 wait a minute for a store that was not there (attack 109).
inline std::chrono::milliseconds StoreConnectWithin(const LaunchEnv& env) {
  return std::min<std::chrono::milliseconds>(env.timeout, std::chrono::seconds(60));
}

// Fails, naming every missing variable and how to launch, when the process
// was not started by ddprun (or torchrun).
StatusOr<LaunchEnv> ReadLaunchEnv();

// Connects to the agent store at MASTER_ADDR:MASTER_PORT and builds the group
// for `device`: Gloo for kCpu, NCCL for kCuda (when built with CUDA). Keys
// live under the attempt's key space ("ddp/attempt_<restart count>/"). Under
// TORCH_DISTRIBUTED_DEBUG=DETAIL each collective is checked against the other
// ranks' first (ddp/collective_check.hpp).
StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(const LaunchEnv& env, Device device);

}  // namespace ddprun::ddp
