#include "rendezvous/coordinator.hpp"
#include "base/no_thread.hpp"

#include <system_error>

namespace ddprun::rendezvous {

Status WaitForKey(StoreClient& client, const std::string& key, Clock::time_point until) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  if (left.count() <= 0) return Status::Ok();
  Status s = client.Wait({key}, left);
  return s.code() == StatusCode::kDeadlineExceeded ? Status::Ok() : s;
}

Coordinator::Coordinator(StoreClient client, RendezvousSettings settings, std::string self_agent_id,
                         Log log)
    : client_(std::move(client)),
      settings_(settings),
      machine_(std::move(settings), std::move(self_agent_id), std::move(log)) {}

Coordinator::~Coordinator() { Stop(); }

Status Coordinator::Start() {
  // Agents of another job that reach this store learn it at once.
  (void)client_.Set(RendezvousKeys::HostedRunId(), settings_.run_id);
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return Unavailable(std::string("start the coordinator thread: ") + e.what() + WhyNoThread());
  }
  return Status::Ok();
}

void Coordinator::Stop() {
  stop_ = true;
  client_.Interrupt();
  if (thread_.joinable()) thread_.join();
}

void Coordinator::Run() {
  ClientKv kv(client_);
  while (!stop_) {
    auto go_on = machine_.Step(kv, Clock::now());
    if (!go_on.ok() || !*go_on) return;
    if (!WaitForKey(client_, machine_.wake_key(), machine_.next_wake()).ok()) return;
  }
}

}  // namespace ddprun::rendezvous
