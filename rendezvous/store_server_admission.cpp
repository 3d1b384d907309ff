// The store server's admission: accepting connections, their handshake
// (VALIDATE, AUTH with the job token, AGENT) under StoreGuard's limits, and
// the timer that ends handshakes, judges queued AUTHs and looks at unread
// replies.
#include <sys/socket.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "rendezvous/sockets.hpp"
#include "rendezvous/store_server_impl.hpp"

namespace ddprun::rendezvous {

namespace {

std::string Seconds(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + "." + std::to_string(d.count() % 1000 / 100) + "s";
}

}  // namespace

void StoreServer::Impl::Accept() {
  auto conn = std::make_unique<Conn>(options_.limits);
  conn->server = this;
  conn->id = next_id_++;
  uv_tcp_init(&loop_, &conn->tcp);
  conn->tcp.data = conn.get();
  if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener_),
                reinterpret_cast<uv_stream_t*>(&conn->tcp)) != 0) {
    Conn* raw = conn.release();  // freed in the close callback below
    uv_close(reinterpret_cast<uv_handle_t*>(&raw->tcp),
             [](uv_handle_t* h) { std::unique_ptr<Conn>(static_cast<Conn*>(h->data)); });
    return;
  }
  accept_error_ = 0;
  uv_tcp_nodelay(&conn->tcp, 1);
  conn->peer = PeerHost(conn->tcp);
  Conn& c = *conn;
  conns_.emplace(c.id, std::move(conn));
  StoreGuard::Admission admission = guard_.Connect(c.id, c.peer, Now());
  if (admission.evict) {
    if (Conn* old = Find(*admission.evict)) {
      Close(*old, "closed to make room: " + std::to_string(guard_.handshaking()) +
                      " connections were in the handshake (the limit); the oldest of the "
                      "host with the most goes");
    }
  }
  if (!admission.admitted) {
    Close(c, "refused: " + admission.refusal);
    return;
  }
  StartReading(c);
  ArmTimer();
}

// libuv closes the connection it could not accept (out of fds); the client
// sees it closed, so the reason is said here, once until an accept succeeds.
void StoreServer::Impl::AcceptFailed(int status) {
  if (accept_error_ == status) return;
  accept_error_ = status;
  Log("store: accept on port " + std::to_string(port_) + ": " + std::strerror(-status) +
      ": a client was turned away (raise ulimit -n)");
}

std::string StoreServer::Impl::PeerHost(const uv_tcp_t& tcp) {
  sockaddr_storage addr{};
  int len = sizeof(addr);
  if (uv_tcp_getpeername(&tcp, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return AddressString(addr);
}

// The agents' key space is for connections that proved the job token
// themselves (any connection when the store has none): a worker admitted
// by its host, or anyone without the token, never reaches it.
void StoreServer::Impl::BecomeAgent(Conn& c) {
  if (!options_.token.empty() && !c.proved) {
    Close(c, "refused: AGENT from a connection that did not prove the job token itself");
    return;
  }
  workers_.Disconnect(c.id);  // waits it had there end
  c.agent = true;
  Encoder e;
  Send(c.id, std::move(e.U8(kAuthOk).bytes()));
}

void StoreServer::Impl::Validate(Conn& c, const Request& req) {
  if (req.op != Op::kValidate || req.word != kValidateMagic) {
    Close(c, "first request is " + OpName(static_cast<uint8_t>(req.op)) +
                 ", not VALIDATE with PyTorch's magic: not a torch >= 2.2 store client");
    return;
  }
  c.stage = Stage::kValidated;
  if (options_.token.empty() || admitted_hosts_.count(c.peer) != 0) BecomeReady(c);
}

void StoreServer::Impl::BecomeReady(Conn& c) {
  c.stage = Stage::kReady;
  guard_.Ready(c.id);
}

// Judges an AUTH now, or parks the connection until its host's turn: after
// failed AUTHs a host's verdicts are spaced (StoreGuard), so a token cannot
// be guessed faster than that, however many connections try.
void StoreServer::Impl::Auth(Conn& c, const std::string& token) {
  switch (guard_.Auth(c.id, Now())) {
    case StoreGuard::Turn::kNow:
      Judge(c, token);
      return;
    case StoreGuard::Turn::kQueued:
      c.parked = true;
      c.parked_token = token;
      uv_read_stop(reinterpret_cast<uv_stream_t*>(&c.tcp));
      ArmTimer();
      return;
    case StoreGuard::Turn::kRefused:
      Close(c, "refused: host " + c.peer + " sent wrong job tokens and " +
                   std::to_string(guard_.limits().max_auth_queue) +
                   " more logins wait their turn; retry later");
      return;
  }
}

void StoreServer::Impl::Judge(Conn& c, const std::string& token) {
  bool ok = options_.token.empty() || token == options_.token;
  guard_.Judged(c.id, ok, Now());
  if (!ok) {
    Close(c, "refused: wrong job token");
    return;
  }
  admitted_hosts_.insert(c.peer);
  c.proved = true;
  if (c.stage != Stage::kReady) BecomeReady(c);
  Encoder e;
  Send(c.id, std::move(e.U8(kAuthOk).bytes()));
}

// A parked AUTH's turn came: judge it, then go on with what followed it.
void StoreServer::Impl::Unpark(Conn& c) {
  c.parked = false;
  Judge(c, c.parked_token);
  if (c.closing) return;
  c.parked_token.clear();
  ReadAgain(c);
}

void StoreServer::Impl::OnTimer() {
  StoreGuard::Time now = Now();
  for (ClientId id : guard_.Expired(now)) {
    Conn* c = Find(id);
    if (!c) {
      guard_.Disconnect(id);
      continue;
    }
    Close(*c,
          c->stage == Stage::kNew
              ? "sent no VALIDATE within " + Seconds(guard_.limits().handshake_timeout)
              : "did not prove the job token within " + Seconds(guard_.limits().handshake_timeout));
  }
  while (std::optional<ClientId> id = guard_.NextDueAuth(now)) {
    if (Conn* c = Find(*id)) Unpark(*c);
  }
  CloseStalledReaders(now);
  ArmTimer();
}

// Runs OnTimer at the guard's next deadline. A timer that fires early (a
// connection left the handshake meanwhile) finds nothing and re-arms.
void StoreServer::Impl::ArmTimer() {
  std::optional<StoreGuard::Time> next = guard_.NextDeadline();
  if (std::optional<StoreGuard::Time> look = replies_.NextLook(Now())) {
    next = next ? std::min(*next, *look) : look;
  }
  if (!next) {
    uv_timer_stop(&timer_);
    return;
  }
  auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - Now());
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->OnTimer(); },
      static_cast<uint64_t>(std::max<int64_t>(wait.count(), 0)), 0);
}

}  // namespace ddprun::rendezvous
