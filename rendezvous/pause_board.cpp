#include "rendezvous/pause_board.hpp"

#include <system_error>

#include "base/no_thread.hpp"

namespace ddprun::rendezvous {

Status PauseLog::Step(Kv& kv, const std::optional<HeldWorker>& tell) {
  if (tell) {
    // The first free place: each one taken by another agent meanwhile is that agent's event.
    const std::string event = self_ + "\n" + tell->Encode();
    while (true) {
      auto stored = kv.CompareSet(keys_.Pause(round_, seen_ + 1), "", event);
      if (!stored.ok()) return stored.status();
      ++seen_;
      if (*stored == event) break;
      Apply(*stored);
    }
  }
  while (true) {
    auto next = kv.TryGet(NextKey());
    if (!next.ok()) return next.status();
    if (!*next) return Status::Ok();
    ++seen_;
    Apply(**next);
  }
}

void PauseLog::Apply(const std::string& event) {
  const size_t newline = event.find('\n');
  if (newline == std::string::npos) return;  // not ours to read: another version's
  const std::string agent = event.substr(0, newline);
  if (agent == self_) return;
  auto held = HeldWorker::Decode(event.substr(newline + 1));
  if (!held.ok()) return;
  if (held->held()) {
    held_[agent] = *held;
  } else {
    held_.erase(agent);
  }
}

std::vector<HeldWorker> PauseLog::Elsewhere() const {
  std::vector<HeldWorker> held;
  held.reserve(held_.size());
  for (const auto& [agent, worker] : held_) held.push_back(worker);
  return held;
}

StatusOr<std::unique_ptr<PauseBoard>> PauseBoard::Start(const std::string& host, int port,
                                                        const RendezvousSettings& settings,
                                                        int round, const std::string& self) {
  auto client =
      StoreClient::Connect(host, port, settings.read_timeout, settings.token, StoreRole::kAgent);
  if (!client.ok()) return client.status().Annotate("rendezvous (pauses across nodes)");
  std::unique_ptr<PauseBoard> board(new PauseBoard(std::move(*client), settings, round, self));
  try {
    board->thread_ = std::thread([b = board.get()] { b->Run(); });
  } catch (const std::system_error& e) {
    return Unavailable(
        std::string("rendezvous: start the thread that tells pauses across nodes: ") + e.what() +
        WhyNoThread());
  }
  return board;
}

PauseBoard::~PauseBoard() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    // The others would wait on for a worker of this node that held the job.
    if (told_.held()) {
      here_ = HeldWorker{};
      done_cv_.wait_for(lock, kLastWord, [this] { return done_; });
    }
  }
  client_.Interrupt();
  if (thread_.joinable()) thread_.join();
}

void PauseBoard::Tell(const HeldWorker& here) {
  std::lock_guard<std::mutex> lock(mu_);
  here_ = here;
}

std::vector<HeldWorker> PauseBoard::Elsewhere() const {
  std::lock_guard<std::mutex> lock(mu_);
  return elsewhere_;
}

void PauseBoard::Run() {
  ClientKv kv(client_);
  bool store_gone = false;
  while (true) {
    std::optional<HeldWorker> tell;
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (here_ != told_) tell = here_;
      stopping = stopping_;
    }
    store_gone = !log_.Step(kv, tell).ok();
    if (!store_gone) {
      std::lock_guard<std::mutex> lock(mu_);
      if (tell) told_ = *tell;
      elsewhere_ = log_.Elsewhere();
    }
    if (stopping || store_gone) break;
    // Wakes on the others' next event, or after kLook for this node's news.
    const Status waited = client_.Wait({log_.NextKey()}, kLook);
    if (!waited.ok() && waited.code() != StatusCode::kDeadlineExceeded) {
      store_gone = true;
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  // The store gone (the rendezvous's watch says so): nothing is known of the others.
  if (store_gone) elsewhere_.clear();
  done_ = true;
  done_cv_.notify_all();
}

}  // namespace ddprun::rendezvous
