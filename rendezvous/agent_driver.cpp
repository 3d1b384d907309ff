#include "rendezvous/agent_driver.hpp"

#include <thread>

#include "rendezvous/coordinator.hpp"

namespace ddprun::rendezvous {

StatusOr<std::unique_ptr<AgentDriver>> AgentDriver::Connect(const std::string& host, int port,
                                                            AgentSettings settings) {
  auto client = StoreClient::Connect(host, port, settings.rdzv.read_timeout, settings.rdzv.token);
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

Action AgentDriver::Next(const SignalQuery& pending_signal) {
  ClientKv kv(client_);
  while (true) {
    Action action;
    int64_t version = 0;
    Clock::time_point wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto [sig, name] = pending_signal(); sig != 0) machine_.Interrupted(sig, name);
      action = machine_.Step(kv, Clock::now());
      version = machine_.version();
      wake = machine_.next_wake();
    }
    if (action.kind != ActionKind::kWait) return action;
    // A store failure shows at the next step.
    (void)WaitForRecord(client_, keys_, version, wake);
  }
}

void AgentDriver::WorkerStoreCleared() {
  std::lock_guard<std::mutex> lock(mu_);
  machine_.WorkerStoreCleared();
}

void AgentDriver::WorkersExited(const WorkersOutcome& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  machine_.WorkersExited(outcome, Clock::now());
}

Status AgentDriver::StartWatching(std::function<void(const std::string&)> on_stop) {
  StopWatching();
  const auto& s = machine_.settings().rdzv;
  auto client = StoreClient::Connect(host_, port_, s.read_timeout, s.token);
  if (!client.ok()) return client.status().Annotate("rendezvous");
  watch_client_.emplace(std::move(*client));
  stop_watching_ = false;
  watcher_ = std::thread([this, on_stop = std::move(on_stop)] { Watch(on_stop); });
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
  if (watcher_.joinable()) watcher_.join();
  watch_client_.reset();
}

void AgentDriver::Watch(std::function<void(const std::string&)> on_stop) {
  ClientKv kv(*watch_client_);
  while (!stop_watching_) {
    Action action;
    int64_t version = 0;
    Clock::time_point wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_watching_) return;
      action = machine_.Step(kv, Clock::now());
      version = machine_.version();
      wake = machine_.next_wake();
    }
    if (action.kind == ActionKind::kStopWorkers || action.kind == ActionKind::kExit) {
      on_stop(action.message);
      return;
    }
    (void)WaitForRecord(*watch_client_, keys_, version, wake);
  }
}

void AgentDriver::Leave(bool hosts_store, std::chrono::milliseconds timeout) {
  if (left_) return;
  left_ = true;
  ClientKv kv(client_);
  auto left = kv.Add(keys_.Leaving(), 1);
  if (!hosts_store || !left.ok()) return;
  // The others that may still read the record: the last round's members and
  // the agents waiting to join the next one. Bounded: a killed agent never
  // says it leaves. The store has no "wait for a counter" request, so this
  // looks every few milliseconds.
  auto rec = ReadRecord(kv, keys_);
  if (!rec.ok()) return;
  auto waiting = kv.Add(keys_.Join(rec->round + 1), 0);
  const int64_t expected =
      static_cast<int64_t>(rec->members.size()) + (waiting.ok() ? *waiting : 0);
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto n = kv.Add(keys_.Leaving(), 0);
    if (!n.ok() || *n >= expected) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ddprun::rendezvous
