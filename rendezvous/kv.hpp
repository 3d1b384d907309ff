// The store operations the rendezvous decision logic needs, behind one
// interface, so the same logic runs against the real store over TCP
// (ClientKv) and against the store's state machine in one process
// (LocalStore, for the deterministic simulation).
//
// Every operation completes at once: none waits for a key to appear. A
// failed operation means the store is gone (or refused the request); the
// logic then ends the agent, as nothing can be agreed any more.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_state.hpp"

namespace ddprun::rendezvous {

class Kv {
 public:
  virtual ~Kv() = default;
  // The value, or nullopt when the key is not there.
  virtual StatusOr<std::optional<std::string>> TryGet(const std::string& key) = 0;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // PyTorch's COMPARE_SET: returns the value stored afterwards.
  virtual StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired) = 0;
};

// Over a connected client; not thread-safe (as the client).
class ClientKv : public Kv {
 public:
  explicit ClientKv(StoreClient& client) : client_(client) {}
  StatusOr<std::optional<std::string>> TryGet(const std::string& key) override;
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired) override;

 private:
  StoreClient& client_;
};

// The store's state machine in this process, with one Kv per simulated
// client. `SetDown(true)` makes every operation fail as if the store host
// died. Not thread-safe.
class LocalStore {
 public:
  LocalStore();
  LocalStore(const LocalStore&) = delete;
  LocalStore& operator=(const LocalStore&) = delete;

  class Handle : public Kv {
   public:
    Handle(LocalStore& store, ClientId id) : store_(store), id_(id) {}
    StatusOr<std::optional<std::string>> TryGet(const std::string& key) override;
    Status Set(const std::string& key, const std::string& value) override;
    StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
    StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                     const std::string& desired) override;

   private:
    LocalStore& store_;
    ClientId id_;
  };

  Handle Connect() { return Handle(*this, next_id_++); }
  void SetDown(bool down) { down_ = down; }

 private:
  // Applies one request; the reply bytes, or an error when the store is down.
  StatusOr<std::string> Call(ClientId id, const Request& request);

  StoreState state_;
  std::string reply_;
  bool down_ = false;
  ClientId next_id_ = 1;
};

}  // namespace ddprun::rendezvous
