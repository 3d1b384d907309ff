// A blocking client of the TCPStore protocol, for the agents and the DDP
// core; it interoperates with PyTorch's server and clients (user keys get
// the same "/" prefix PyTorch's client adds).
//
// Every call is bounded: by `timeout` for waits, and by the operation
// timeout given at Connect for everything else. A connection that breaks is
// reported as the store being gone ("store 10.0.0.1:29400 is gone: ...").
// Not thread-safe: one request in flight, as in PyTorch's client.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "base/unique_fd.hpp"
#include "rendezvous/sockets.hpp"

namespace ddprun::rendezvous {

// Which of a ddprun store's key spaces a connection uses: the workers' (what
// any PyTorch client gets) or, for the agents' rendezvous, the agents'.
enum class StoreRole { kWorker, kAgent };

class StoreClient {
 public:
  using Duration = std::chrono::milliseconds;

  // Connects (retrying until `timeout` while the store is not up), sends
  // VALIDATE and PING, AUTH with `token` when one is given, and AGENT for
  // kAgent. A PyTorch server knows no AGENT: use kWorker against one.
  // A store under load may close a connection in its handshake (its guard:
  // too many handshaking, or per host; rendezvous/store_guard.hpp): such a
  // close is retried up to kHandshakeRetries times, 100 ms apart and doubling,
  // within `timeout`. A refused token closes the connection the same way, so
  // its error comes after the retries (about 1.5 s).
  static constexpr int kHandshakeRetries = 3;
  // `interrupted` ends the wait for a store not up yet (kAborted).
  // `connect_within`, when given, is how long a store not up yet is waited
  // for instead; requests still time out after `timeout`.
  static StatusOr<StoreClient> Connect(const std::string& host, int port, Duration timeout,
                                       const std::string& token = "",
                                       StoreRole role = StoreRole::kWorker,
                                       const Interrupted& interrupted = {},
                                       Duration connect_within = Duration::zero());

  Status Set(const std::string& key, const std::string& value);
  // Waits for the key (up to the operation timeout), then reads it.
  StatusOr<std::string> Get(const std::string& key);
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired);
  StatusOr<bool> Check(const std::vector<std::string>& keys);
  // kDeadlineExceeded when the keys do not all appear within `timeout`.
  Status Wait(const std::vector<std::string>& keys, Duration timeout);
  StatusOr<int64_t> NumKeys();
  StatusOr<bool> DeleteKey(const std::string& key);
  Status Append(const std::string& key, const std::string& value);
  StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys);
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values);
  StatusOr<std::vector<std::string>> ListKeys();
  Status QueuePush(const std::string& key, const std::string& value);
  // The front item, or no item when the queue is empty.
  StatusOr<std::vector<std::string>> QueuePop(const std::string& key);
  StatusOr<int64_t> QueueLen(const std::string& key);
  // Agents only: empties the workers' key space for a new round.
  Status ClearWorkers();

  // Thread-safe: makes a call blocked in another thread return at once (as
  // if the store were gone) and every later call fail.
  void Interrupt();

  const std::string& address() const { return address_; }
  void set_timeout(Duration d) { timeout_ = d; }
  // The time this process's clients have spent, all together, blocked waiting
  // for a store's replies while the process ran (time it was stopped or
  // starved not counted): a gap between an agent's steps this explains was
  // the store's silence, not the agent's absence. Thread-safe.
  static std::chrono::nanoseconds Waited();
  // A read this client is blocked in asks `interrupted` every 200 ms and,
  // when it says so, fails with kAborted; the connection is then unusable (its
  // reply may still come). Only from the thread that makes the requests; {}
  // for none.
  void set_interrupted(Interrupted interrupted) { interrupted_ = std::move(interrupted); }

  // Called once per connection when a store that took it has not answered the
  // handshake within kSlowHandshake (while this process ran), with the
  // address, the seconds waited and the read timeout's: a stopped or starved
  // agent hosting it keeps a joining agent waiting up to read_timeout with
  // nothing said. Set once, before any client connects (the launcher logs it).
  using SlowHandshakeNotice =
      std::function<void(const std::string& address, double waited_s, double limit_s)>;
  static void set_slow_handshake_notice(SlowHandshakeNotice notice);
  static constexpr std::chrono::seconds kSlowHandshake{5};
  // Called while Connect waits for a store that is not up yet (nothing
  // listens at its address), after kNotUpNotice and then every kNotUpEvery,
  // with the address, the seconds waited and the seconds left. Set once,
  // before any client connects (the launcher logs it).
  using NotUpNotice =
      std::function<void(const std::string& address, double waited_s, double left_s)>;
  static void set_not_up_notice(NotUpNotice notice);
  static constexpr std::chrono::seconds kNotUpNotice{5};
  static constexpr std::chrono::seconds kNotUpEvery{30};

 private:
  StoreClient(UniqueFd fd, std::string address, Duration timeout)
      : fd_(std::move(fd)), address_(std::move(address)), timeout_(timeout) {}

  // One connection and handshake; `closed` says whether it failed because the
  // store closed the connection before answering (worth another try).
  static StatusOr<StoreClient> ConnectOnce(const std::string& host, int port, Duration timeout,
                                           Clock::time_point deadline, const std::string& token,
                                           StoreRole role, const Interrupted& interrupted,
                                           bool* closed);

  Status SendBytes(const std::string& bytes);
  Status ReadExact(void* out, size_t n, Clock::time_point deadline);
  StatusOr<std::string> ReadString(Clock::time_point deadline);
  StatusOr<int64_t> ReadI64(Clock::time_point deadline);
  StatusOr<uint8_t> ReadU8(Clock::time_point deadline);
  Status Gone(const std::string& what) const;
  Clock::time_point Deadline() const { return Clock::now() + timeout_; }

  UniqueFd fd_;  // set at construction, closed only by the destructor
  bool broken_ = false;
  Interrupted interrupted_;  // ends a read (kAborted): while connecting, or set_interrupted
  // The handshake's: ReadExact calls it once, past kSlowHandshake of waiting.
  std::function<void(double waited_s)> slow_;
  std::string address_;
  Duration timeout_;
};

}  // namespace ddprun::rendezvous
