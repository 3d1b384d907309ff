// The store server's inside, shared by its two source files:
// store_server.cpp (the loop, requests, replies and closes) and
// store_server_admission.cpp (accepting, the handshake, AUTH, the timer).
// Private to them: everything here runs on the loop thread unless it says so.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/status.hpp"
#include "base/unique_fd.hpp"
#include "rendezvous/repeat_limiter.hpp"
#include "rendezvous/reply_budget.hpp"
#include "rendezvous/store_guard.hpp"
#include "rendezvous/store_protocol.hpp"
#include "rendezvous/store_server.hpp"
#include "rendezvous/store_state.hpp"

namespace ddprun::rendezvous {

class StoreServer::Impl {
 public:
  static constexpr size_t kReadChunk = 64 * 1024;

  enum class Stage { kNew, kValidated, kReady };

  struct Conn {
    explicit Conn(const Limits& limits) : parser(limits) {}
    uv_tcp_t tcp{};
    Impl* server = nullptr;
    ClientId id = 0;
    std::string peer;  // host address
    RequestParser parser;
    size_t out_pending = 0;
    Stage stage = Stage::kNew;
    bool proved = false;             // sent the job token itself (AUTH)
    bool agent = false;              // in the agents' key space (AGENT)
    bool used_workers = false;       // sent a request to the workers' key space
    bool parked = false;             // its AUTH waits for its host's turn (StoreGuard)
    std::string parked_token;        // that AUTH's token
    bool paused = false;             // its next request waits for replies to drain (ReplyBudget)
    std::optional<Request> waiting;  // the request paused, parsed: its reply would be large
    std::string held;                // bytes read while parked or paused, parsed after
    bool closing = false;
  };

  struct WriteReq {
    uv_write_t req{};
    std::string data;
    Conn* conn = nullptr;
  };

  explicit Impl(StoreServerOptions options)
      : options_(std::move(options)),
        agents_([this](ClientId c, std::string bytes) { Send(c, std::move(bytes)); },
                options_.limits.max_reply, options_.limits.max_value),
        workers_([this](ClientId c, std::string bytes) { Send(c, std::move(bytes)); },
                 options_.limits.max_reply, options_.limits.max_value),
        guard_(options_.guard),
        replies_(options_.replies) {}
  ~Impl();

  // From the thread that starts or stops the server.
  Status Listen(UniqueFd fd, int port);
  void Run(std::function<void()> task);

  int port() const { return port_; }
  size_t connections() const { return conns_.size(); }
  void ClearWorkers();

 private:
  static StoreGuard::Time Now() { return StoreGuard::Clock::now(); }

  Conn* Find(ClientId id) {
    auto it = conns_.find(id);
    return it == conns_.end() || it->second->closing ? nullptr : it->second.get();
  }

  // store_server.cpp: the loop, requests, replies and closes.
  void Post(std::function<void()> task);
  void RunTasks();
  void Log(const std::string& message);
  void StartReading(Conn& c);
  void Consume(Conn& c, std::string_view data);
  bool MustWait(const Conn& c, const Request& req) const;
  void Pause(Conn& c);
  void ResumeReaders();
  void ReadAgain(Conn& c);
  void Dispatch(Conn& c, const Request& req);
  void CloseStalledReaders(StoreGuard::Time now);
  void CountUnsent(Conn& c, StoreGuard::Time now);
  void Send(ClientId id, std::string bytes);
  void SayRepeats(StoreGuard::Time now);
  void SayRepeatsLater();
  void CloseHandles();
  void Close(Conn& c, const std::string& why);

  // store_server_admission.cpp: accepting, the handshake, AUTH, the timer.
  void Accept();
  void AcceptFailed(int status);
  static std::string PeerHost(const uv_tcp_t& tcp);
  void BecomeAgent(Conn& c);
  void Validate(Conn& c, const Request& req);
  void BecomeReady(Conn& c);
  void Auth(Conn& c, const std::string& token);
  void Judge(Conn& c, const std::string& token);
  void Unpark(Conn& c);
  void OnTimer();
  void ArmTimer();

  StoreServerOptions options_;
  StoreState agents_;   // the rendezvous: AGENT connections only
  StoreState workers_;  // everyone else: the workers' init_process_group
  StoreGuard guard_;
  ReplyBudget replies_;
  std::deque<ClientId> paused_;  // connections whose reading waits for the replies, in order
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_timer_t timer_{};
  uv_timer_t said_timer_{};
  RepeatLimiter closes_{options_.guard.close_said_every};
  uv_async_t wake_{};
  std::thread thread_;
  std::mutex tasks_mu_;
  std::vector<std::function<void()>> tasks_;
  std::unordered_map<ClientId, std::unique_ptr<Conn>> conns_;
  std::unordered_set<std::string> admitted_hosts_;
  std::vector<char> read_buffer_ = std::vector<char>(kReadChunk);
  ClientId next_id_ = 1;
  int port_ = 0;
  bool loop_ready_ = false;  // uv_loop_init succeeded
  int accept_error_ = 0;     // the last accept's libuv error, 0 after a success
  bool stopping_ = false;
};

}  // namespace ddprun::rendezvous
