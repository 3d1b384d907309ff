#include "ddp/cuda/nccl_process_group.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "base/format.hpp"
#include "base/pause_clock.hpp"
#include "ddp/flight_recorder.hpp"
#include "ddp/store_exchange.hpp"
#include "env/names.hpp"

namespace ddprun::ddp {
namespace {

using Clock = std::chrono::steady_clock;

// How often the watchdog polls ncclCommGetAsyncError while collectives are in
// flight: NCCL reports remote and network failures only there (PyTorch: 100 ms).
constexpr auto kAsyncErrorPoll = std::chrono::milliseconds(100);
// The watchdog looks at least this often, as a pause clock needs (pause_clock.hpp).
static_assert(kAsyncErrorPoll <= ddprun::PauseClock::kTick);

Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(what + ": " + cudaGetErrorString(err));
}

Status NcclStatus(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return Status::Ok();
  std::string detail = ncclGetLastError(nullptr);
  return Unavailable(what + ": " + ncclGetErrorString(r) +
                     (detail.empty() ? "" : " (" + detail + ")"));
}

struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using UniqueEvent = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kUInt8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }

// The unique id travels hex-encoded, so the store never sees raw bytes.
std::string ToHex(const ncclUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : id.internal) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

bool FromHex(const std::string& hex, ncclUniqueId* id) {
  if (hex.size() != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &value) != 1) return false;
    id->internal[i] = static_cast<char>(value);
  }
  return true;
}

// The collective's end event is shared with its Work's stream wait, which
// may outlive the entry.
using SharedEvent = std::shared_ptr<std::remove_pointer_t<cudaEvent_t>>;

struct InFlight {
  uint64_t seq;
  const char* op;
  TensorView tensor;
  Clock::time_point issued;
  SharedEvent done;
  std::shared_ptr<Work> work;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  struct Parts {
    rendezvous::StoreClient store;
    std::string prefix;
    int device;
    ncclComm_t comm;
    cudaStream_t stream;
    UniqueEvent ready;
    std::unique_ptr<FlightRecorder> recorder;
  };

  NcclProcessGroup(const LaunchEnv& env, Parts parts)
      : ProcessGroup(env.rank, env.world_size, "nccl"), parts_(std::move(parts)) {
    set_timeout(env.timeout);
    completer_ = std::thread([this] { CompleterLoop(); });
    watchdog_ = std::thread([this] { WatchdogLoop(); });
  }

  // Waits for the collectives in flight (the watchdog still bounds them).
  ~NcclProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    completer_.join();
    watchdog_.join();
    if (!aborted_) ncclCommDestroy(parts_.comm);
    cudaStreamDestroy(parts_.stream);
  }

  std::shared_ptr<Work> AllReduce(TensorView t, ReduceOp op) override {
    return Issue("allreduce", t, [&] {
      return ncclAllReduce(t.data, t.data, t.count, NcclType(t.dtype), NcclOp(op), parts_.comm,
                           parts_.stream);
    });
  }

  std::shared_ptr<Work> Broadcast(TensorView t, int root) override {
    return Issue("broadcast", t, [&] {
      return ncclBroadcast(t.data, t.data, t.count, NcclType(t.dtype), root, parts_.comm,
                           parts_.stream);
    });
  }

  StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& mine) override {
    const std::string base = parts_.prefix + "gather/" + std::to_string(gathers_++) + "/";
    return ExchangeThroughStore(parts_.store, base, rank_, size_, mine, timeout_);
  }

  uint64_t sequence() const override { return next_seq_; }

  void Entering(const char* op, const TensorView& t) override {
    if (parts_.recorder) parts_.recorder->Enqueued(next_seq_, op, t.bytes(), t.dtype);
  }

 private:
  std::string Describe(uint64_t seq, const char* op, TensorView t) const {
    return std::string(op) + " #" + std::to_string(seq) + " (" + FormatBytes(t.bytes()) + " " +
           DTypeName(t.dtype) + ")";
  }

  static std::shared_ptr<Work> Failed(Status s) {
    auto work = std::make_shared<Work>();
    work->Complete(std::move(s));
    return work;
  }

  std::shared_ptr<Work> Issue(const char* op, TensorView t,
                              const std::function<ncclResult_t()>& launch) {
    const uint64_t seq = next_seq_++;
    if (t.device != Device::kCuda) {
      return Failed(InvalidArgument("ddp: " + Describe(seq, op, t) +
                                    " on nccl needs device memory, got host memory"));
    }
    if (parts_.recorder) parts_.recorder->Enqueued(seq, op, t.bytes(), t.dtype);
    InFlight entry{seq, op, t, Clock::now(), nullptr, std::make_shared<Work>()};
    if (Status s = Launch(launch, &entry.done); !s.ok()) {
      if (parts_.recorder) parts_.recorder->Finished(seq, false);
      return Failed(s.Annotate("ddp: " + Describe(seq, op, t) + " on nccl"));
    }
    if (parts_.recorder) parts_.recorder->Started(seq);
    auto work = entry.work;
    work->set_stream_wait([this, event = entry.done]() { return StreamWait(event.get()); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(std::move(entry));
    }
    cv_.notify_all();
    return work;
  }

  // Work::Synchronize of a collective still running: the legacy default
  // stream waits for its end event; the host does not. The status is the
  // group's (broken after a timeout or an NCCL error).
  Status StreamWait(cudaEvent_t event) {
    Status s = CudaStatus(cudaStreamWaitEvent(cudaStreamLegacy, event, 0),
                          "ddp: cudaStreamWaitEvent on a collective's end");
    std::lock_guard<std::mutex> lock(mu_);
    return broken_.ok() ? s : broken_;
  }

  // The group's stream waits for the work already on the legacy default
  // stream (where the caller computed `t`), runs the collective, then fires
  // `done`. comm_mu_ keeps the watchdog's ncclCommAbort out of a launch.
  Status Launch(const std::function<ncclResult_t()>& launch, SharedEvent* done) {
    cudaEvent_t event = nullptr;
    Status s =
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync),
                   "cudaEventCreate");
    if (!s.ok()) return s;
    done->reset(event, EventDeleter{});
    std::lock_guard<std::mutex> lock(comm_mu_);
    {
      std::lock_guard<std::mutex> state(mu_);
      if (!broken_.ok()) return broken_;
    }
    s = CudaStatus(cudaEventRecord(parts_.ready.get(), cudaStreamLegacy), "cudaEventRecord");
    if (s.ok()) {
      s = CudaStatus(cudaStreamWaitEvent(parts_.stream, parts_.ready.get(), 0),
                     "cudaStreamWaitEvent");
    }
    if (s.ok()) s = NcclStatus(launch(), "launch");
    if (s.ok()) s = CudaStatus(cudaEventRecord(event, parts_.stream), "cudaEventRecord");
    return s;
  }

  // Completes the collectives in order as their events fire. After an abort
  // the aborted kernels end, their events fire, and their Work gets the error.
  void CompleterLoop() {
    cudaSetDevice(parts_.device);
    while (true) {
      cudaEvent_t event;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) return;
        event = pending_.front().done.get();  // deque: stays valid across push_back
      }
      cudaError_t err = cudaEventSynchronize(event);
      std::unique_lock<std::mutex> lock(mu_);
      InFlight done = std::move(pending_.front());
      pending_.pop_front();
      Status s = broken_;
      if (s.ok() && err != cudaSuccess) {
        s = CudaStatus(err, "ddp: " + Describe(done.seq, done.op, done.tensor) + " on nccl");
      }
      lock.unlock();
      cv_.notify_all();
      if (parts_.recorder) parts_.recorder->Finished(done.seq, s.ok());
      done.work->Complete(std::move(s));
    }
  }

  // Wakes at the oldest collective's deadline, and every kAsyncErrorPoll
  // while any is in flight; sleeps on the condition when none is. Time in
  // which this process did not run (the job suspended whole, Ctrl-Z) does
  // not count: every collective in flight is moved out by it.
  void WatchdogLoop() {
    cudaSetDevice(parts_.device);
    std::unique_lock<std::mutex> lock(mu_);
    PauseClock pauses;
    pauses.Start(Clock::now());
    while (!(stop_ && pending_.empty())) {
      if (pending_.empty() || !broken_.ok()) {
        cv_.wait(lock);
        pauses.Start(Clock::now());
        continue;
      }
      const InFlight& oldest = pending_.front();
      const auto deadline = oldest.issued + timeout_;
      cv_.wait_until(lock, std::min(deadline, Clock::now() + kAsyncErrorPoll));
      if (pending_.empty() || !broken_.ok()) continue;
      const auto pause = pauses.Look(Clock::now()).discounted;
      for (InFlight& f : pending_) f.issued += pause;
      const InFlight& head = pending_.front();
      const double waited = std::chrono::duration<double>(Clock::now() - head.issued).count();
      const std::string what = "ddp: " + Describe(head.seq, head.op, head.tensor) + " on nccl";
      if (Clock::now() >= head.issued + timeout_) {
        AbortLocked(lock, Status(StatusCode::kDeadlineExceeded, what + " timed out after " +
                                                                    FormatSeconds(waited) +
                                                                    " s: communicator aborted"));
        continue;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(parts_.comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        AbortLocked(lock, Unavailable(what + " failed after " + FormatSeconds(waited) + " s: " +
                                      ncclGetErrorString(async) + ": communicator aborted"));
      }
    }
  }

  // REQUIRES: `lock` holds mu_; it is released around ncclCommAbort, which
  // ends the kernels so that the completer can fail their Work.
  void AbortLocked(std::unique_lock<std::mutex>& lock, Status why) {
    broken_ = std::move(why);
    lock.unlock();
    {
      std::lock_guard<std::mutex> comm(comm_mu_);
      ncclCommAbort(parts_.comm);
      aborted_ = true;
    }
    lock.lock();
  }

  Parts parts_;
  std::mutex comm_mu_;  // launches vs. abort
  std::atomic<bool> aborted_{false};
  std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::deque<InFlight> pending_;
  Status broken_;
  bool stop_ = false;
  std::atomic<uint64_t> next_seq_{0};
  uint64_t gathers_ = 0;
  std::thread completer_;
  std::thread watchdog_;
};

StatusOr<std::string> LocalDeviceRecord(const LaunchEnv& env, int* device) {
  if (Status s = CudaStatus(cudaGetDevice(device), "no current CUDA device"); !s.ok()) return s;
  char bus_id[64] = {};
  Status s = CudaStatus(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), *device),
                        "cudaDeviceGetPCIBusId of device " + std::to_string(*device));
  if (!s.ok()) return s;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + bus_id + "/" + std::to_string(env.local_rank);
}

// Rank 0 makes the id; the others wait for it (bounded by the store's timeout).
StatusOr<ncclUniqueId> ShareUniqueId(const LaunchEnv& env, rendezvous::StoreClient& store,
                                     const std::string& key) {
  ncclUniqueId id;
  if (env.rank == 0) {
    if (Status s = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) return s;
    if (Status s = store.Set(key, ToHex(id)); !s.ok()) return s;
    return id;
  }
  auto hex = store.Get(key);
  if (!hex.ok()) return hex.status();
  if (!FromHex(*hex, &id)) return Internal("malformed nccl unique id under key " + key);
  return id;
}

// ncclCommInitRank with a deadline (the collective timeout). Every rank
// reached this point (the device exchange proved it), so an init that does
// not finish is NCCL's bootstrap or transport failing to connect. The blocking
// call runs on a thread of its own: a communicator in NCCL's non-blocking mode
// would make every later collective asynchronous too. At the deadline the
// worker fails; the thread, stuck inside NCCL, ends with the process.
Status InitCommWithDeadline(const LaunchEnv& env, const ncclUniqueId& id, ncclComm_t* comm) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    ncclResult_t result = ncclSuccess;
    ncclComm_t comm = nullptr;
  };
  auto shared = std::make_shared<Shared>();
  const int device = [] {
    int d = 0;
    cudaGetDevice(&d);
    return d;
  }();
  const std::string what = "ncclCommInitRank (rank " + std::to_string(env.rank) + " of " +
                           std::to_string(env.world_size) + ")";
  try {
    std::thread([shared, id, device, n = env.world_size, rank = env.rank] {
      cudaSetDevice(device);  // the device is per thread
      ncclComm_t c = nullptr;
      const ncclResult_t r = ncclCommInitRank(&c, n, id, rank);
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->result = r;
      shared->comm = c;
      shared->done = true;
      shared->cv.notify_all();
    }).detach();
  } catch (const std::system_error& e) {
    return Unavailable(what + ": cannot start its thread: " + e.what());
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, env.timeout, [&] { return shared->done; })) {
    return Status(StatusCode::kDeadlineExceeded,
                  what + " did not finish within " + FormatSeconds(env.timeout.count() / 1e3) +
                      " s though every rank reached it: NCCL's bootstrap or transport cannot "
                      "connect (NCCL_SOCKET_IFNAME, a firewall, or the network); NCCL_DEBUG=INFO "
                      "shows where it waits");
  }
  if (Status s = NcclStatus(shared->result, what); !s.ok()) return s;
  *comm = shared->comm;
  return Status::Ok();
}

}  // namespace

Status CheckOneRankPerDevice(const std::vector<std::string>& published,
                             const char* visible_devices) {
  std::map<std::string, std::string> first_user;  // "<host>/<pci>" -> local rank
  for (size_t r = 0; r < published.size(); ++r) {
    const std::string& record = published[r];
    const size_t cut = record.rfind('/');
    const size_t bus = cut == std::string::npos ? cut : record.rfind('/', cut - 1);
    if (bus == std::string::npos) {
      return Internal("ddp: rank " + std::to_string(r) + " published a malformed device record \"" +
                      record + "\"");
    }
    const std::string where = record.substr(0, cut);
    const std::string local = record.substr(cut + 1);
    auto [it, fresh] = first_user.emplace(where, local);
    if (fresh) continue;
    const std::string env = visible_devices != nullptr
                                ? std::string("CUDA_VISIBLE_DEVICES=") + visible_devices
                                : "CUDA_VISIBLE_DEVICES not set";
    return InvalidArgument("ddp: local ranks " + it->second + " and " + local + " on " +
                           record.substr(0, bus) + " both use GPU " +
                           record.substr(bus + 1, cut - bus - 1) + " (" + env +
                           "): give each local rank its own device (ddprun sets LOCAL_RANK; call "
                           "cudaSetDevice(LOCAL_RANK))");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(const LaunchEnv& env,
                                                               rendezvous::StoreClient store) {
  const std::string prefix = "ddp/attempt_" + std::to_string(env.restart_count) + "/nccl/";
  int device = 0;
  auto mine = LocalDeviceRecord(env, &device);
  if (!mine.ok()) return mine.status().Annotate("ddp: nccl set-up");
  auto all =
      ExchangeThroughStore(store, prefix + "device/", env.rank, env.world_size, *mine, env.timeout);
  if (!all.ok()) return all.status().Annotate("ddp: nccl set-up: device exchange");
  if (Status s = CheckOneRankPerDevice(*all, std::getenv(env::kCudaVisibleDevices)); !s.ok()) {
    return s;
  }
  auto id = ShareUniqueId(env, store, prefix + "unique_id");
  if (!id.ok()) return id.status().Annotate("ddp: nccl set-up: unique id");

  NcclProcessGroup::Parts parts{std::move(store), prefix,  device, nullptr,
                                nullptr,          nullptr, nullptr};
  parts.recorder = FlightRecorder::OpenForGroup(env.trace_file, env.rank);
  cudaEvent_t ready = nullptr;
  Status s =
      CudaStatus(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  if (!s.ok()) return s.Annotate("ddp: nccl set-up");
  parts.ready.reset(ready);
  // Non-blocking: the legacy default stream must not wait for collectives,
  // or backward would stall behind every bucket's all-reduce.
  s = CudaStatus(cudaStreamCreateWithFlags(&parts.stream, cudaStreamNonBlocking),
                 "cudaStreamCreate");
  if (!s.ok()) return s.Annotate("ddp: nccl set-up");
  s = InitCommWithDeadline(env, *id, &parts.comm);
  if (!s.ok()) {
    cudaStreamDestroy(parts.stream);
    return s.Annotate("ddp: nccl set-up");
  }
  return std::unique_ptr<ProcessGroup>(std::make_unique<NcclProcessGroup>(env, std::move(parts)));
}

StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroupFromEnv(const LaunchEnv& env) {
  auto store = rendezvous::StoreClient::Connect(env.master_addr, env.master_port,
                                                StoreConnectWithin(env), env.store_token);
  if (!store.ok()) return store.status().Annotate("ddp: agent store (MASTER_ADDR:MASTER_PORT)");
  store->set_timeout(env.timeout);
  return CreateNcclProcessGroup(env, std::move(*store));
}

}  // namespace ddprun::ddp
