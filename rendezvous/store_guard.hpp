// The store server's admission policy: who may hold a connection, and how
// much a connection that has not finished its handshake may cost. No sockets
// and no clock of its own: the server reports connections, handshakes and
// AUTH verdicts with the time, and asks what to close and when to look again,
// so the policy is tested with made-up times (store_guard_test.cpp).
//
//   - A connection is *in the handshake* from accept until it is ready
//     (VALIDATE, then AUTH where the store needs the job token). In the
//     handshake it may send at most `handshake_bytes` and must finish within
//     `handshake_timeout`.
//   - Past `max_handshaking` connections in the handshake (all hosts
//     together), a new one closes the oldest handshaking connection of the
//     host that has the most, so a flood from one host evicts its own. Only
//     one that has been in the handshake for `evict_after` goes: a burst of
//     honest clients (thousands of ranks starting at once) handshakes faster
//     than that. With none that old, the new one is admitted, up to
//     `max_handshaking_hard`, past which new connections are refused.
//   - A host holds at most `max_connections_per_host` connections, ready or
//     not; one more is refused.
//   - Failed AUTHs space a host's next verdicts: after n failures in a row the
//     next AUTH from that host is judged `auth_backoff` * 2^(n-1) later (at
//     most `auth_backoff_max`). AUTHs that arrive meanwhile wait in line, at
//     most `max_auth_queue` of them; more are refused. A success, or
//     `auth_forget` without a failure, clears the count.
//   - Ready connections have no deadline: PyTorch clients hold silent
//     connections for a whole job (docs/store-protocol.md §5).
//
// Thread safety: none; the server calls it from its loop thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rendezvous/store_state.hpp"

namespace ddprun::rendezvous {

struct GuardLimits {
  std::chrono::milliseconds handshake_timeout{10'000};
  // VALIDATE (5) + PING (5) + AUTH with the longest token (4105) fit twice.
  size_t handshake_bytes = 8 * 1024;
  size_t max_handshaking = 256;
  std::chrono::milliseconds evict_after{1'000};
  size_t max_handshaking_hard = 4096;
  size_t max_connections_per_host = 4096;
  std::chrono::milliseconds auth_backoff{100};
  std::chrono::milliseconds auth_backoff_max{2'000};
  std::chrono::milliseconds auth_forget{60'000};
  size_t max_auth_queue = 8;
  // A client closed for the same reason as one said within this is counted,
  // and the count said as it ends (RepeatLimiter); 0 says every one.
  std::chrono::milliseconds close_said_every{5'000};
};

class StoreGuard {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;

  explicit StoreGuard(GuardLimits limits) : limits_(limits) {}

  struct Admission {
    bool admitted = false;
    std::string refusal;            // why not, when not admitted
    std::optional<ClientId> evict;  // a handshaking connection to close to make room
  };
  // A connection accepted from `host` at `now`. When admitted it is in the
  // handshake until Ready or Disconnect.
  Admission Connect(ClientId id, const std::string& host, Time now);
  // `id` finished its handshake: no deadline and no byte bound from now on.
  void Ready(ClientId id);
  // `id` is gone (any id; unknown ones are ignored).
  void Disconnect(ClientId id);

  // Bytes `id` may still send in its handshake (0 once ready: no bound).
  size_t HandshakeBytesLeft(ClientId id) const;
  // Counts `n` bytes sent by `id` in its handshake; false once over the bound.
  bool CountHandshakeBytes(ClientId id, size_t n);

  enum class Turn { kNow, kQueued, kRefused };
  // An AUTH from `id` arrived at `now`: judge it now, or it waits in its
  // host's line (NextDueAuth hands it out), or the line is full.
  Turn Auth(ClientId id, Time now);
  // The verdict on `id`'s AUTH, judged at `now`.
  void Judged(ClientId id, bool ok, Time now);
  // A queued AUTH whose turn has come by `now`, if any. Report its verdict
  // with Judged before asking again.
  std::optional<ClientId> NextDueAuth(Time now);

  // Connections whose handshake deadline passed by `now`, oldest first; the
  // caller closes them (and calls Disconnect).
  std::vector<ClientId> Expired(Time now);
  // When Expired or NextDueAuth next has something; nullopt: nothing pending.
  std::optional<Time> NextDeadline() const;

  size_t handshaking() const { return handshaking_; }
  const GuardLimits& limits() const { return limits_; }

 private:
  struct Conn {
    std::string host;
    Time since;  // accepted
    Time deadline;
    bool handshaking = true;
    size_t handshake_bytes = 0;
  };
  struct Host {
    size_t connections = 0;
    std::set<ClientId> handshaking;  // ids grow with accept time: begin() is the oldest
    int failures = 0;                // failed AUTHs in a row
    Time last_failure{};
    Time next_verdict{};
    std::deque<ClientId> auth_queue;
  };

  std::optional<ClientId> OldestOfBusiestHost() const;
  void LeaveHandshake(ClientId id, Conn& conn);
  std::chrono::milliseconds Backoff(int failures) const;
  void Forget(const std::string& host);
  void DropIdleHosts();

  GuardLimits limits_;
  std::unordered_map<ClientId, Conn> conns_;
  std::unordered_map<std::string, Host> hosts_;
  std::set<std::pair<Time, ClientId>> deadlines_;
  std::set<std::string> queued_hosts_;  // hosts with a non-empty auth_queue
  size_t handshaking_ = 0;
};

}  // namespace ddprun::rendezvous
