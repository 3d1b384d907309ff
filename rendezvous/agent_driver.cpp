#include "rendezvous/agent_driver.hpp"

#include <algorithm>
#include <map>
#include <system_error>
#include <thread>

#include "base/format.hpp"
#include "base/no_thread.hpp"
#include "rendezvous/coordinator.hpp"
#include "rendezvous/sockets.hpp"

namespace ddprun::rendezvous {
namespace {

// For one call: the store requests `client` is blocked in end once `stop`
// says so (StoreClient::set_interrupted).
class AbandonWhen {
 public:
  AbandonWhen(StoreClient& client, Interrupted stop) : client_(client) {
    client_.set_interrupted(std::move(stop));
  }
  ~AbandonWhen() { client_.set_interrupted({}); }
  AbandonWhen(const AbandonWhen&) = delete;
  AbandonWhen& operator=(const AbandonWhen&) = delete;

 private:
  StoreClient& client_;
};

}  // namespace

StatusOr<std::unique_ptr<AgentDriver>> AgentDriver::Connect(const std::string& host, int port,
                                                            AgentSettings settings,
                                                            const Interrupted& interrupted) {
  const auto within = settings.rdzv.connect_timeout;
  auto client = StoreClient::Connect(host, port, settings.rdzv.read_timeout, settings.rdzv.token,
                                     StoreRole::kAgent, interrupted, within);
  if (client.status().code() == StatusCode::kAborted) return client.status();
  // Not up within the connect timeout; one that took the connection and did
  // not answer says its own bound (the read timeout).
  if (client.status().code() == StatusCode::kDeadlineExceeded &&
      client.status().message().find("took the connection") == std::string::npos) {
    return Status(StatusCode::kDeadlineExceeded,
                  "rendezvous: " + client.status().message() + " after " +
                      FormatSeconds(std::chrono::duration<double>(within).count()) +
                      " s (how long an agent waits for the store at its start: --rdzv_conf "
                      "read_timeout under c10d, timeout under static)");
  }
  if (!client.ok()) return client.status().Annotate("rendezvous");
  std::unique_ptr<AgentDriver> driver(
      new AgentDriver(std::move(*client), host, port, std::move(settings)));
  if (Status s = driver->CheckHostedJob(); !s.ok()) return s;
  return driver;
}

Status AgentDriver::CheckHostedJob() {
  auto hosted = client_.Get(RendezvousKeys::HostedRunId());
  if (!hosted.ok()) return hosted.status().Annotate("rendezvous: which job the store hosts");
  const std::string& run_id = machine_.settings().rdzv.run_id;
  if (*hosted == run_id) return Status::Ok();
  return InvalidArgument("rendezvous: the store at " + client_.address() + " coordinates job \"" +
                         *hosted + "\", not \"" + run_id +
                         "\": give every agent of a job the same --rdzv_id, or use another "
                         "--rdzv_endpoint");
}

void AgentDriver::FailedEarly(const WorkersOutcome& outcome) {
  std::lock_guard<std::mutex> lock(early_mu_);
  early_ = outcome;
}

Action AgentDriver::TimedStep(Kv& kv) {
  using std::chrono::milliseconds;
  {
    std::lock_guard<std::mutex> lock(early_mu_);
    if (early_) machine_.FailedEarly(*early_, Clock::now());
    early_.reset();
  }
  const auto waited = StoreClient::Waited();  // by every thread's client: between the steps
  machine_.WaitedForStore(std::chrono::duration_cast<milliseconds>(waited - waited_at_step_));
  waited_at_step_ = waited;
  const auto began = Clock::now();
  const bool was_gone = machine_.phase() == AgentMachine::Phase::kStoreGone;
  Action action = machine_.Step(kv, began);
  const bool gone = !was_gone && machine_.phase() == AgentMachine::Phase::kStoreGone;
  if (action.kind != ActionKind::kExit && !gone) return action;
  return machine_.StepTook(std::chrono::duration_cast<milliseconds>(Clock::now() - began),
                           std::chrono::duration_cast<milliseconds>(StoreClient::Waited() - waited),
                           action);
}

Action AgentDriver::Next(const SignalQuery& pending_signal, const ProgressFn& on_progress) {
  ClientKv kv(client_);
  // A signal the store keeps this agent from acting on: the request is
  // abandoned (the connection with it) kSignalGrace after the signal came.
  std::pair<int, std::string> abandoned;
  std::optional<Clock::time_point> signalled;
  AbandonWhen abandon(client_, [&] {
    auto signal = pending_signal();
    if (signal.first == 0) return false;
    const auto now = Clock::now();
    if (!signalled) signalled = now;
    if (now - *signalled < kSignalGrace) return false;
    abandoned = std::move(signal);
    return true;
  });
  while (true) {
    Action action;
    std::string key;
    Clock::time_point wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto [sig, name] = pending_signal(); sig != 0) machine_.Interrupted(sig, name);
      action = TimedStep(kv);
      key = machine_.wake_key();
      wake = machine_.next_wake();
    }
    if (action.kind != ActionKind::kWait && abandoned.first == 0) return action;
    if (abandoned.first == 0) {
      if (!action.message.empty() && on_progress) {
        on_progress("rendezvous at " + HostPort(host_, port_) + ": " + action.message);
      }
      // A store failure shows at the next step.
      (void)WaitForKey(client_, key, wake);
    }
    if (abandoned.first != 0) {  // whatever that step made of the broken connection
      std::lock_guard<std::mutex> lock(mu_);
      return machine_.Abandoned(abandoned.first, abandoned.second, client_.address());
    }
  }
}

Status AgentDriver::ClearWorkerStore() {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status s = client_.ClearWorkers(); !s.ok()) {
    return s.Annotate("rendezvous: empty the workers' key space");
  }
  machine_.WorkerStoreCleared();
  return Status::Ok();
}

void AgentDriver::WorkersExited(const WorkersOutcome& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  machine_.WorkersExited(outcome, Clock::now());
}

Status AgentDriver::StartWatching(NoteFn on_stop, NoteFn on_note) {
  StopWatching();
  const auto& s = machine_.settings().rdzv;
  auto client = StoreClient::Connect(host_, port_, s.read_timeout, s.token, StoreRole::kAgent);
  if (!client.ok()) return client.status().Annotate("rendezvous");
  watch_client_.emplace(std::move(*client));
  stop_watching_ = false;
  try {
    watcher_ = std::thread([this, on_stop = std::move(on_stop), on_note = std::move(on_note)] {
      Watch(on_stop, on_note);
    });
  } catch (const std::system_error& e) {
    watch_client_.reset();
    return Unavailable(std::string("rendezvous: start the watch thread: ") + e.what() +
                       WhyNoThread());
  }
  return Status::Ok();
}

void AgentDriver::StopWatching() {
  {
    // Under the lock, so no step is cut off half way (the machine would take
    // the broken connection for the store being gone).
    std::lock_guard<std::mutex> lock(mu_);
    stop_watching_ = true;
    if (watch_client_) watch_client_->Interrupt();
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  watch_client_.reset();
}

void AgentDriver::Watch(const NoteFn& on_stop, const NoteFn& on_note) {
  ClientKv kv(*watch_client_);
  // After the stop is asked for, the machine is still stepped while the
  // workers take their grace: its keep-alive goes on, and the time is not
  // taken for this agent not running.
  bool told = false;
  while (!stop_watching_) {
    Action action;
    std::string key;
    Clock::time_point wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_watching_) return;
      action = TimedStep(kv);
      key = machine_.wake_key();
      wake = machine_.next_wake();
    }
    if ((action.kind == ActionKind::kStopWorkers || action.kind == ActionKind::kExit) && !told) {
      on_stop(action.message);
      told = true;
    } else if (action.kind == ActionKind::kWait && !action.message.empty() && on_note) {
      on_note(action.message);
    }
    if (action.kind == ActionKind::kExit) return;
    {
      // The store is gone: nothing more to watch once the workers are being
      // stopped, their exit decides (AgentMachine::AfterStoreGone); until
      // then the machine is stepped by its clock alone.
      std::unique_lock<std::mutex> lock(mu_);
      if (machine_.phase() == AgentMachine::Phase::kStoreGone) {
        if (told) return;
        stop_cv_.wait_until(lock, wake, [this] { return stop_watching_.load(); });
        continue;
      }
    }
    (void)WaitForKey(*watch_client_, key, wake);
  }
}

int AgentDriver::Leave(bool hosts_store, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds grace, bool signalled,
                       const SignalQuery& pending_signal) {
  if (left_) return 0;
  left_ = true;
  ClientKv kv(client_);
  const std::string& self = machine_.settings().self.agent_id;
  {
    // A courtesy to the store host: not worth more than kLeaveSaid, or a new signal.
    const auto until = Clock::now() + kLeaveSaid;
    AbandonWhen abandon(client_,
                        [&] { return Clock::now() >= until || pending_signal().first != 0; });
    if (!kv.Set(keys_.Left(self), "1").ok() || !kv.Add(keys_.Departed(), 1).ok() || !hosts_store) {
      return 0;
    }
  }
  // The others that may still read the record: the last round's members and
  // the agents waiting to join the next one, for `timeout`; agents lost
  // (paused, or killed: nothing tells which) for the keep-alive limit (even
  // when `timeout` is shorter: one paused a little past the limit then reads
  // the outcome, its own loss, instead of finding the store gone), past
  // which they are dead by contract (one that comes back later finds the
  // store gone and says it was likely dropped); not when a signal ends the
  // job (a scancel's KillWait may be shorter than that limit: attack 84).
  // Bounded: a killed agent never says it leaves. The store has no "wait for
  // one of these keys" request, so this looks every few milliseconds.
  // One that still beats is alive: a member, or one of an earlier round,
  // most likely stopping its workers (a failure recorded from it as their
  // grace began): it is waited for `grace` longer, as long as it beats (a
  // killed or stopped one does not hold the job's end; attack 82). One whose
  // keep-alive stays still for the keep-alive limit is dead by contract,
  // member or not (attack 101: a node killed after its workers succeeded
  // held the host 30 s).
  const auto now = Clock::now();
  const auto& s = machine_.settings().rdzv;
  const auto beating = now + timeout + grace;
  struct Waited {
    Clock::time_point until;
    std::optional<int64_t> beats;
    Clock::time_point beat_seen;  // when its keep-alive last moved (or the wait began)
  };
  std::map<std::string, Waited> waiting;
  for (const auto& [agent, other] : Others(kv, self, now + timeout, now + s.KeepAliveLimit())) {
    if (other.in_job || !signalled) waiting[agent] = Waited{other.until, std::nullopt, now};
  }
  while (!waiting.empty()) {
    if (int sig = pending_signal().first; sig != 0) return sig;
    const auto t = Clock::now();
    for (auto it = waiting.begin(); it != waiting.end();) {
      auto left = kv.TryGet(keys_.Left(it->first));
      if (!left.ok()) return 0;
      Waited& w = it->second;
      bool dead = false;
      if (!*left) {
        auto beat = kv.Add(keys_.KeepAlive(it->first), 0);
        if (!beat.ok()) return 0;
        if (w.beats && *w.beats != *beat) {
          w.beat_seen = t;
          if (grace.count() > 0 && w.until < beating) {
            w.until = std::max(w.until, std::min(beating, t + grace));
          }
        }
        w.beats = *beat;
        dead = t - w.beat_seen >= s.KeepAliveLimit();
      }
      it = (*left || dead || t >= w.until) ? waiting.erase(it) : std::next(it);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

std::map<std::string, AgentDriver::Other> AgentDriver::Others(Kv& kv, const std::string& self,
                                                              Clock::time_point current,
                                                              Clock::time_point earlier) {
  std::map<std::string, Other> others;
  auto rec = ReadRecord(kv, keys_);
  if (!rec.ok()) return others;
  for (int r = 0; r <= rec->round + 1; ++r) {
    auto joined = kv.Add(keys_.Join(r), 0);
    for (int i = 0; joined.ok() && i < *joined; ++i) {
      auto text = kv.TryGet(keys_.Node(r, i));
      if (!text.ok() || !*text) continue;
      auto node = NodeInfo::Decode(**text);
      if (!node.ok() || node->agent_id == self) continue;
      const int member = rec->MemberRank(node->agent_id);
      const bool lost = node->agent_id == rec->lost_agent || (member >= 0 && rec->gone[member]);
      const bool now_in = (r == rec->round + 1 || member >= 0) && !lost;
      Other& other = others[node->agent_id];
      other.until = std::max(other.until, now_in ? current : earlier);
      other.in_job = other.in_job || now_in;
    }
  }
  return others;
}

}  // namespace ddprun::rendezvous
