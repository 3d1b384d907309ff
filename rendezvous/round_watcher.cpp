#include "rendezvous/round_watcher.hpp"

namespace ddprun::rendezvous {

namespace {

constexpr std::chrono::milliseconds kSlice{200};

}  // namespace

std::string EndKind(const std::string& reason) { return reason.substr(0, reason.find(':')); }

Status RoundWatcher::Start(const std::string& host, int port, const RendezvousSettings& settings,
                           const std::string& agent_id, int round, OnEnd on_end) {
  Stop();
  auto client = StoreClient::Connect(host, port, settings.read_timeout, settings.token);
  if (!client.ok()) return client.status();
  stop_ = false;
  client_.emplace(std::move(*client));
  thread_ = std::thread([this, settings, agent_id, round, on_end = std::move(on_end)]() {
    Run(settings, agent_id, round, on_end);
  });
  return Status::Ok();
}

void RoundWatcher::Stop() {
  stop_ = true;
  if (client_) client_->Interrupt();
  if (thread_.joinable()) thread_.join();
  client_.reset();
}

void RoundWatcher::Run(RendezvousSettings settings, std::string agent_id, int round, OnEnd on_end) {
  RendezvousKeys keys(settings.run_id);
  StoreClient& client = *client_;
  // A failure seen after Stop() is the interruption itself, not news.
  auto report = [&](const std::string& reason) {
    if (!stop_) on_end(reason);
  };
  auto next_beat = Clock::now();
  while (!stop_) {
    if (Clock::now() >= next_beat) {
      auto beat = client.Add(keys.KeepAlive(agent_id), 1);
      if (!beat.ok()) {
        report("store: " + beat.status().message());
        return;
      }
      next_beat = Clock::now() + settings.keep_alive_interval;
    }
    // Short slices so that Stop() is prompt; the wait itself is the event.
    Status s = client.Wait({keys.End(round)}, kSlice);
    if (s.ok()) {
      auto reason = client.Get(keys.End(round));
      report(reason.ok() ? *reason : "store: " + reason.status().message());
      return;
    }
    if (s.code() != StatusCode::kDeadlineExceeded) {
      report("store: " + s.message());
      return;
    }
  }
}

}  // namespace ddprun::rendezvous
