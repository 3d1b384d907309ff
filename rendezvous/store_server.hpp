// A TCPStore-compatible server on libuv, on its own thread: PyTorch 2.x
// clients (torch.distributed.TCPStore, init_process_group env://) and
// ddprun's StoreClient use it alike.
//
// Hardening: a malformed or oversized request (Limits) closes that connection
// and nothing else. A connection's next request is read once its replies are
// taken, and none while all unread replies pass ReplyLimits::max_total, past
// which clients that read nothing are closed (ReplyBudget). Parsing costs linear time in the bytes
// received. Until its handshake is done a connection may send only a few KiB
// and must finish within a deadline; connections per host are capped, and
// failed AUTHs slow down their host's next ones (GuardLimits, StoreGuard).
// Ready connections are never timed out: PyTorch clients hold silent
// connections for a whole job (there is no keep-alive).
//
// Access control (ddprun's extension): with a token, a connection must send
// AUTH with the token right after VALIDATE unless its host already has a
// connection that proved it; everyone else is disconnected.
//
// Two key spaces behind one port: a connection that sends AGENT (after
// proving the token itself, where there is one) is served the agents' key
// space, the rendezvous; every other client (PyTorch's TCPStore in the
// workers, ddprun's DDP core) the workers' key space. Neither sees the
// other's keys, waits or queues. CLEAR_WORKERS (from an agent) or
// ClearWorkers() starts a new round of workers (docs/store-protocol.md §6).
//
// Thread safety: Start, ClearWorkers, port and the destructor may be called from any
// one thread; the server's own work happens on its loop thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.hpp"
#include "rendezvous/reply_budget.hpp"
#include "rendezvous/store_guard.hpp"
#include "rendezvous/store_protocol.hpp"

namespace ddprun::rendezvous {

struct StoreServerOptions {
  std::string host;   // address to bind; "" binds every interface (dual-stack)
  int port = 0;       // 0: the kernel picks a free port
  std::string token;  // "" = no access control
  Limits limits;
  // Called on the loop thread for notable events (refused clients, closes on
  // malformed input). Must be thread-safe.
  std::function<void(const std::string&)> log;
  // Last, so that callers that brace-initialise the fields above need not name them.
  GuardLimits guard;
  ReplyLimits replies;
};

class StoreServer {
 public:
  // Binds, listens and starts the loop thread. Fails (kUnavailable) with the
  // address when the port is taken or the host does not resolve.
  static StatusOr<std::unique_ptr<StoreServer>> Start(StoreServerOptions options);
  ~StoreServer();  // stops the loop and closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Empties the workers' key space and queues and closes the worker
  // connections that used them (an earlier round's); returns once done.
  void ClearWorkers();
  // Number of connected clients, read on the loop thread.
  size_t Connections();

  class Impl;
  struct Key {
    explicit Key() = default;
  };
  StoreServer(Key, std::unique_ptr<Impl> impl);  // use Start()

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
