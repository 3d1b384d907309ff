#include "ddp/process_group.hpp"

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "base/parse.hpp"

#include "ddp/collective_check.hpp"
#include "ddp/gloo_process_group.hpp"
#include "env/names.hpp"
#ifdef DDPRUN_HAVE_CUDA
#include "ddp/cuda/nccl_process_group.hpp"
#endif

namespace ddprun::ddp {

Status Work::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

Status Work::Synchronize() {
  if (!stream_wait_ || Done()) return Wait();
  return stream_wait_();
}

bool Work::Done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Work::Complete(Status s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(s);
    done_ = true;
  }
  cv_.notify_all();
}

namespace {

const char* Get(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool ParseIntVar(const char* name, int* out, std::string* bad) {
  const char* v = Get(name);
  if (v == nullptr) return false;
  auto n = ParseInteger(name, v, 0, std::numeric_limits<int>::max(), "");
  if (!n.ok()) {
    *bad += std::string(bad->empty() ? "" : ", ") + name + "=" + v;
    return false;
  }
  *out = static_cast<int>(*n);
  return true;
}

}  // namespace

StatusOr<LaunchEnv> ReadLaunchEnv() {
  LaunchEnv e;
  std::string missing, bad;
  for (auto [name, field] : {std::pair{env::kRank, &e.rank},
                             {env::kWorldSize, &e.world_size},
                             {env::kLocalRank, &e.local_rank},
                             {env::kMasterPort, &e.master_port}}) {
    if (!ParseIntVar(name, field, &bad) && Get(name) == nullptr) {
      missing += std::string(missing.empty() ? "" : ", ") + name;
    }
  }
  if (const char* addr = Get(env::kMasterAddr)) {
    e.master_addr = addr;
  } else {
    missing += std::string(missing.empty() ? "" : ", ") + env::kMasterAddr;
  }
  if (!missing.empty()) {
    return InvalidArgument("ddp: " + missing +
                           " not set: this program is a data-parallel worker; start it with "
                           "ddprun, e.g. ddprun --nproc_per_node=2 " +
                           std::string("./train"));
  }
  if (!bad.empty()) return InvalidArgument("ddp: invalid launcher variables: " + bad);
  ParseIntVar(env::kLocalWorldSize, &e.local_world_size, &bad);
  ParseIntVar(env::kRestartCount, &e.restart_count, &bad);
  if (e.world_size < 1 || e.rank >= e.world_size) {
    return InvalidArgument(std::string("ddp: ") + env::kRank + "=" + std::to_string(e.rank) +
                           " is not below " + env::kWorldSize + "=" + std::to_string(e.world_size));
  }
  if (const char* t = Get(env::kCollectiveTimeout)) {
    auto s = ParseSeconds(env::kCollectiveTimeout, t, /*allow_zero=*/false);
    if (!s.ok()) return s.status().Annotate("ddp");
    e.timeout = std::chrono::ceil<std::chrono::milliseconds>(*s);
  }
  if (const char* t = Get(env::kStoreToken)) e.store_token = t;
  if (const char* t = Get(env::kTraceFile)) e.trace_file = t;
  if (const char* t = Get(env::kHeartbeatFile)) e.heartbeat_file = t;
  return e;
}

namespace {

StatusOr<std::unique_ptr<ProcessGroup>> CreateBackend(const LaunchEnv& env, Device device) {
  if (device == Device::kCpu) return CreateGlooProcessGroup(env);
#ifdef DDPRUN_HAVE_CUDA
  return CreateNcclProcessGroupFromEnv(env);
#else
  return Unimplemented("ddp: this build has no CUDA/NCCL path (built without the CUDA toolkit)");
#endif
}

}  // namespace

StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(const LaunchEnv& env, Device device) {
  auto checked = CollectiveCheckRequested();
  if (!checked.ok()) return checked.status();
  auto group = CreateBackend(env, device);
  if (!group.ok() || !*checked) return group;
  if (env.rank == 0) {
    std::fprintf(stderr,
                 "ddp: TORCH_DISTRIBUTED_DEBUG=DETAIL: each collective is compared with the "
                 "other ranks' before it runs (a store round trip each: slower)\n");
  }
  return WithCollectiveCheck(std::move(*group));
}

}  // namespace ddprun::ddp
