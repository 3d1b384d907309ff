// The key-value state behind the store server, with PyTorch's semantics for
// every request (docs/store-protocol.md): deferred WAIT and BARRIER replies,
// CANCEL_WAIT, the COMPARE_SET rules, decimal ADD counters, queues.
//
// Knows nothing about sockets: replies go out through the Send callback,
// possibly to a client other than the one whose request is being handled
// (a SET completes other clients' WAITs). Not thread-safe; the server calls
// it from its loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rendezvous/store_protocol.hpp"

namespace ddprun::rendezvous {

using ClientId = uint64_t;

class StoreState {
 public:
  using Send = std::function<void(ClientId, std::string bytes)>;

  // `max_reply`: the largest reply it makes (Limits::max_reply); `max_value`: the
  // largest value APPEND may make (Limits::max_value, which the parser holds each
  // request's value to).
  explicit StoreState(Send send, size_t max_reply = SIZE_MAX, size_t max_value = SIZE_MAX)
      : send_(std::move(send)), max_reply_(max_reply), max_value_(max_value) {}

  // Applies one request (not VALIDATE, AUTH, AGENT or CLEAR_WORKERS, which
  // the server handles).
  // Returns false when the request is invalid in this state (ADD to a value
  // that is not a number, a MULTI_GET whose reply would pass max_reply, an
  // APPEND that would make a value over max_value): the
  // server then closes the connection, as PyTorch's does, saying refusal().
  bool Handle(ClientId client, const Request& request);
  // Why the last Handle returned false.
  const std::string& refusal() const { return refusal_; }

  // How many bytes the reply to `request` would be if handled now (WAIT's and
  // BARRIER's, which come later, are small): a GET of a large value, a
  // MULTI_GET, QUEUE_POP, COMPARE_SET or LIST_KEYS can be large. The server
  // lets large ones wait while unread replies pass its bound (ReplyBudget).
  size_t ReplySize(const Request& request) const;

  // Drops every wait of a client that went away.
  void Disconnect(ClientId client);

  // Empties the key space and the queues (a new attempt's clean slate).
  // Waiting clients keep waiting.
  void Clear();

  size_t num_keys() const { return kv_.size(); }

 private:
  void Wake(const std::string& key);
  void WakeOne(const std::string& key);
  void Reply(ClientId client, Encoder& e) { send_(client, std::move(e.bytes())); }
  void Wait(ClientId client, const std::vector<std::string>& keys);
  bool Add(ClientId client, const Request& r);
  void CompareSet(ClientId client, const Request& r);
  void Barrier(ClientId client, const Request& r);
  bool Present(const std::string& key) const;

  Send send_;
  size_t max_reply_;
  size_t max_value_;
  std::string refusal_;
  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<ClientId>> waiters_;  // key -> clients
  std::unordered_map<ClientId, size_t> awaited_;                    // client -> keys missing
};

}  // namespace ddprun::rendezvous
