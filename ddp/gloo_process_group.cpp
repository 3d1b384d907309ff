#include "ddp/gloo_process_group.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "base/format.hpp"
#include "base/no_thread.hpp"
#include "base/pause_clock.hpp"
#include "base/unique_fd.hpp"
#include "ddp/error_file.hpp"
#include "ddp/flight_recorder.hpp"
#include "ddp/gloo_reduce.hpp"
#include "ddp/new_sockets.hpp"
#include "ddp/store_exchange.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::ddp {

namespace {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Gloo's own timeout counts the time this process did not run (a job
// suspended whole, Ctrl-Z, a freezer): the group's watchdog keeps the
// collective timeout instead, and Gloo's is only a backstop (unless the
// watchdog found no connections to shut down: then Gloo keeps it).
constexpr Ms kGlooBackstop = std::chrono::hours(24 * 7);

// Gloo's Store on ddprun's store client. Gloo's get() must block until the
// key exists (its full-mesh set-up reads peers' keys without waiting).
class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(rendezvous::StoreClient client) : client_(std::move(client)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard<std::mutex> lock(mu_);
    Check(client_.Set(key, std::string(data.begin(), data.end())), "set " + key);
  }
  std::vector<char> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto v = client_.Get(key);
    Check(v.status(), "get " + key);
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const Ms& timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    Status waited = client_.Wait(keys, timeout);
    if (waited.code() == StatusCode::kDeadlineExceeded) {
      // Gloo's keys end in the rank: the ranks that never came are named
      // (the one that waited was taken for the cause).
      if (const std::string ranks = MissingRanks(client_, keys); !ranks.empty()) {
        throw std::runtime_error("rank(s) " + ranks + " did not arrive within " +
                                 FormatSeconds(static_cast<double>(timeout.count()) / 1e3) +
                                 " s: they failed, hang or started late; their logs say which");
      }
    }
    Check(waited, "wait");
  }

  rendezvous::StoreClient& client() { return client_; }
  std::mutex& mu() { return mu_; }

 private:
  static void Check(const Status& s, const std::string& what) {
    if (!s.ok()) throw std::runtime_error("store " + what + ": " + s.message());
  }

  std::mutex mu_;
  rendezvous::StoreClient client_;
};

// The local address that routes to `master` (UDP connect sends nothing).
std::string LocalAddressToward(const std::string& master, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return "";
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
  UniqueFd fd(socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() || connect(fd.get(), res->ai_addr, res->ai_addrlen) != 0) return "";
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len);
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = local.ss_family == AF_INET
                      ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                      : &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr;
  inet_ntop(local.ss_family, a, buf, sizeof(buf));
  return buf;
}

// Gloo moves elements of the tensor's size; what they are is the reduce function's business.
void SetOutput(gloo::AllreduceOptions& o, TensorView t) {
  switch (SizeOf(t.dtype)) {
    case 1:
      o.setOutput(static_cast<uint8_t*>(t.data), t.count);
      break;
    case 2:
      o.setOutput(static_cast<uint16_t*>(t.data), t.count);
      break;
    case 4:
      o.setOutput(static_cast<uint32_t*>(t.data), t.count);
      break;
    default:
      o.setOutput(static_cast<uint64_t*>(t.data), t.count);
      break;
  }
}

class GlooProcessGroup : public ProcessGroup {
 public:
  GlooProcessGroup(const LaunchEnv& env, std::shared_ptr<GlooStore> store, std::string prefix,
                   std::shared_ptr<gloo::rendezvous::Context> ctx,
                   std::unique_ptr<FlightRecorder> recorder, NewSockets sockets)
      : ProcessGroup(env.rank, env.world_size, "gloo"),
        store_(std::move(store)),
        prefix_(std::move(prefix)),
        ctx_(std::move(ctx)),
        recorder_(std::move(recorder)),
        sockets_(std::move(sockets)) {
    timeout_ = env.timeout;
    watched_ = size_ == 1 || sockets_.size() > 0;
    thread_ = std::thread([this] { Loop(); });
    watchdog_ = std::thread([this] { Watch(); });
  }

  ~GlooProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }

  // A dtype Gloo cannot reduce fails at once, on every rank alike, and
  // issues no collective.
  std::shared_ptr<Work> AllReduce(TensorView t, ReduceOp op) override {
    auto reduce = GlooReduceFor(t.dtype, op);
    if (!reduce.ok()) {
      auto work = std::make_shared<Work>();
      work->Complete(reduce.status().Annotate("ddp: allreduce"));
      return work;
    }
    return Enqueue("allreduce", t, [this, t, reduce = *reduce](uint32_t tag) {
      gloo::AllreduceOptions o(ctx_);
      o.setTag(tag);
      o.setTimeout(GlooTimeout());
      SetOutput(o, t);
      o.setReduceFunction(reduce);
      gloo::allreduce(o);
    });
  }

  std::shared_ptr<Work> Broadcast(TensorView t, int root) override {
    return Enqueue("broadcast", t, [this, t, root](uint32_t tag) {
      gloo::BroadcastOptions o(ctx_);
      o.setTag(tag);
      o.setTimeout(GlooTimeout());
      o.setRoot(root);
      o.setOutput(static_cast<uint8_t*>(t.data), t.bytes());
      gloo::broadcast(o);
    });
  }

  StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& mine) override {
    std::lock_guard<std::mutex> lock(store_->mu());
    auto& c = store_->client();
    const std::string base = prefix_ + "gather/" + std::to_string(gathers_++) + "/";
    // A timeout names the ranks that never arrived (attack 91).
    return ExchangeThroughStore(c, base, rank_, size_, mine, timeout());
  }

  uint64_t sequence() const override { return next_seq_; }

  void Entering(const char* op, const TensorView& t) override {
    if (recorder_) recorder_->Enqueued(next_seq_, op, t.bytes(), t.dtype);
  }

 private:
  struct Op {
    uint64_t seq;
    const char* name;
    TensorView tensor;
    std::function<void(uint32_t)> run;
    std::shared_ptr<Work> work;
  };

  std::shared_ptr<Work> Enqueue(const char* name, TensorView t, std::function<void(uint32_t)> run) {
    auto work = std::make_shared<Work>();
    uint64_t seq = next_seq_++;
    if (recorder_) recorder_->Enqueued(seq, name, t.bytes(), t.dtype);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Op{seq, name, t, std::move(run), work});
    }
    cv_.notify_all();
    return work;
  }

  Ms GlooTimeout() const { return watched_ ? kGlooBackstop : timeout_; }

  std::string Describe(const Op& op) const {
    return std::string(op.name) + " #" + std::to_string(op.seq) + " (" +
           FormatBytes(op.tensor.bytes()) + " " + DTypeName(op.tensor.dtype) + ")";
  }

  void Execute(Op& op) {
    if (!broken_.empty()) {
      op.work->Complete(Unavailable("ddp: " + Describe(op) + " not run: the process group is " +
                                    "broken since " + broken_));
      if (recorder_) recorder_->Finished(op.seq, false);
      return;
    }
    if (recorder_) recorder_->Started(op.seq);
    const auto start = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = Running{start + timeout_, Clock::duration{0}, false};
      pauses_.Start(start);
    }
    cv_.notify_all();
    std::string error;
    try {
      op.run(static_cast<uint32_t>(op.seq & 0x7fffffff));
    } catch (const std::exception& e) {
      error = e.what();
    }
    const Running ran = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return *std::exchange(running_, std::nullopt);
    }();
    if (error.empty() && !ran.timed_out) {
      if (recorder_) recorder_->Finished(op.seq, true);
      op.work->Complete(Status::Ok());
      return;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    const double paused = std::chrono::duration<double>(ran.paused).count();
    // Gloo's own timeout, where it keeps it (no connections found to watch).
    const bool gloo_timed_out = !watched_ && (error.find("Timed out") != std::string::npos ||
                                              error.find("timeout") != std::string::npos);
    const bool timed_out = ran.timed_out || gloo_timed_out;
    std::string msg = "ddp: rank " + std::to_string(rank_) + ": " + Describe(op);
    if (timed_out) {
      msg += " timed out after " + FormatSeconds(waited) + " s (collective timeout " +
             FormatSeconds(timeout_.count() / 1e3) + " s" +
             (paused > 0 ? ", not counting " + FormatSeconds(paused) +
                               " s in which this process did not run"
                         : "") +
             "; a rank stopped participating)" +
             (ran.timed_out ? ": connections shut down" : ": " + error);
    } else {
      msg += " failed after " + FormatSeconds(waited) + " s: " + error;
    }
    broken_ = Describe(op) + (timed_out ? " timed out" : " failed");
    if (recorder_) recorder_->Finished(op.seq, false);
    op.work->Complete(
        Status(timed_out ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable, msg));
  }

  // The collective timeout, in time this process ran: looks every tick while
  // a collective runs, moves its deadline out by every pause it sees, and at
  // the deadline shuts the group's connections down, which ends the
  // collective here with an error and at once on the ranks still connected.
  void Watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!watch_stop_) {
      if (!running_ || running_->timed_out || !watched_) {
        cv_.wait(lock);
        continue;
      }
      cv_.wait_until(lock, std::min(running_->deadline, Clock::now() + PauseClock::kTick));
      if (!running_ || running_->timed_out) continue;
      const auto now = Clock::now();
      const auto pause = pauses_.Look(now).discounted;
      running_->deadline += pause;
      running_->paused += pause;
      if (now < running_->deadline) continue;
      running_->timed_out = true;
      lock.unlock();
      AbortConnections();
      lock.lock();
    }
  }

  // Shuts the group's connections down: the collective fails here (Gloo's
  // reader fails every pending operation) and on the ranks still connected.
  void AbortConnections() { sockets_.ShutDown(); }

  void Loop() {
    while (true) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      Execute(op);
    }
  }

  std::shared_ptr<GlooStore> store_;
  std::string prefix_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::unique_ptr<FlightRecorder> recorder_;
  NewSockets sockets_;   // the group's connections
  bool watched_ = true;  // the watchdog keeps the timeout (else Gloo does)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stop_ = false;
  std::string broken_;  // only touched by the worker thread
  // The collective the worker thread runs (under mu_), for the watchdog.
  struct Running {
    Clock::time_point deadline;
    Clock::duration paused;  // this process did not run meanwhile
    bool timed_out;          // the watchdog shut the connections down
  };
  std::optional<Running> running_;
  PauseClock pauses_;        // under mu_
  bool watch_stop_ = false;  // the worker thread has ended
  std::thread watchdog_;
  std::atomic<uint64_t> next_seq_{0};
  uint64_t gathers_ = 0;
  std::thread thread_;
};

// Gloo's I/O thread checks what arrives with GLOO_ENFORCE, whose exception
// no caller can catch there: std::terminate ends the process (SIGABRT). A
// message of another size than the collective posted does it (the ranks'
// collectives differ in size). Its text goes to the error file first, where
// the failure report quotes it (it said "no traceback"; attack 91).
std::terminate_handler g_before_gloo = nullptr;

void OnTerminate() {
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const gloo::EnforceNotMet& x) {
      (void)RecordError(std::string("ddp: Gloo ended the process (a check in its I/O thread "
                                    "failed): ") +
                        x.what() +
                        ": a message of another size than the collective expected arrives "
                        "when the ranks' collectives differ in size (their programs diverged)");
    } catch (...) {  // not Gloo's: as before
    }
  }
  if (g_before_gloo != nullptr) g_before_gloo();
  std::abort();
}

void RecordGlooAborts() {
  static std::once_flag once;
  std::call_once(once, [] { g_before_gloo = std::set_terminate(OnTerminate); });
}

}  // namespace

StatusOr<std::unique_ptr<ProcessGroup>> CreateGlooProcessGroup(const LaunchEnv& env) {
  RecordGlooAborts();
  auto client = rendezvous::StoreClient::Connect(env.master_addr, env.master_port,
                                                 StoreConnectWithin(env), env.store_token);
  if (!client.ok()) return client.status().Annotate("ddp: agent store (MASTER_ADDR:MASTER_PORT)");
  client->set_timeout(env.timeout);
  auto store = std::make_shared<GlooStore>(std::move(*client));
  const std::string prefix = "ddp/attempt_" + std::to_string(env.restart_count) + "/";
  gloo::transport::tcp::attr attr;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    attr.iface = ifname;
  } else {
    attr.hostname = LocalAddressToward(env.master_addr, env.master_port);
    if (attr.hostname.empty()) attr.hostname = env.master_addr;
  }
  std::unique_ptr<FlightRecorder> recorder = FlightRecorder::OpenForGroup(env.trace_file, env.rank);
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world_size);
    ctx->setTimeout(env.timeout);
    gloo::rendezvous::PrefixStore scoped(prefix + "gloo", *store);
    NewSockets sockets;
    ctx->connectFullMesh(scoped, device);
    sockets.Collect();
    return std::unique_ptr<ProcessGroup>(std::make_unique<GlooProcessGroup>(
        env, store, prefix, std::move(ctx), std::move(recorder), std::move(sockets)));
  } catch (const std::exception& e) {
    const auto* failed = dynamic_cast<const std::system_error*>(&e);
    const bool no_thread =
        failed != nullptr && failed->code() == std::errc::resource_unavailable_try_again;
    return Unavailable(std::string("ddp: gloo set-up (rank ") + std::to_string(env.rank) + " of " +
                       std::to_string(env.world_size) + ", local address " +
                       (attr.iface.empty() ? attr.hostname : "iface " + attr.iface) +
                       "): " + e.what() + (no_thread ? WhyNoThread() : ""));
  }
}

}  // namespace ddprun::ddp
