#include "rendezvous/store_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/format.hpp"
#include "base/no_thread.hpp"
#include "base/unique_fd.hpp"
#include "rendezvous/repeat_limiter.hpp"
#include "rendezvous/sockets.hpp"
#include "rendezvous/store_guard.hpp"
#include "rendezvous/store_state.hpp"

namespace ddprun::rendezvous {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

enum class Stage { kNew, kValidated, kReady };

std::string Seconds(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + "." + std::to_string(d.count() % 1000 / 100) + "s";
}

}  // namespace

class StoreServer::Impl {
 public:
  struct Conn {
    explicit Conn(const Limits& limits) : parser(limits) {}
    uv_tcp_t tcp{};
    Impl* server = nullptr;
    ClientId id = 0;
    std::string peer;  // host address
    RequestParser parser;
    size_t out_pending = 0;
    Stage stage = Stage::kNew;
    bool proved = false;        // sent the job token itself (AUTH)
    bool agent = false;         // in the agents' key space (AGENT)
    bool used_workers = false;  // sent a request to the workers' key space
    bool parked = false;        // its AUTH waits for its host's turn (StoreGuard)
    std::string parked_token;   // that AUTH's token
    std::string held;           // bytes read after that AUTH, parsed once it is judged
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
                options_.limits.max_reply),
        workers_([this](ClientId c, std::string bytes) { Send(c, std::move(bytes)); },
                 options_.limits.max_reply),
        guard_(options_.guard) {}

  // On failure the loop thread never started; the destructor closes what was set up.
  Status Listen(UniqueFd fd, int port) {
    port_ = port;
    if (int rc = uv_loop_init(&loop_); rc != 0) return ErrnoStatus("uv_loop_init", -rc);
    loop_ready_ = true;
    uv_tcp_init(&loop_, &listener_);
    listener_.data = this;
    if (int rc = uv_tcp_open(&listener_, fd.get()); rc != 0) return ErrnoStatus("uv_tcp_open", -rc);
    fd.Release();
    int rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), SOMAXCONN,
                       [](uv_stream_t* s, int status) {
                         auto* self = static_cast<Impl*>(s->data);
                         if (status == 0) self->Accept();
                         if (status != 0) self->AcceptFailed(status);
                       });
    if (rc != 0) return ErrnoStatus("listen", -rc);
    uv_timer_init(&loop_, &timer_);
    timer_.data = this;
    uv_timer_init(&loop_, &said_timer_);
    said_timer_.data = this;
    rc = uv_async_init(&loop_, &wake_,
                       [](uv_async_t* a) { static_cast<Impl*>(a->data)->RunTasks(); });
    if (rc != 0) return ErrnoStatus("uv_async_init", -rc);
    wake_.data = this;
    try {
      thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
    } catch (const std::system_error& e) {
      return Unavailable(std::string("start the store thread: ") + e.what() + WhyNoThread());
    }
    return Status::Ok();
  }

  ~Impl() {
    if (thread_.joinable()) {
      Post([this] {
        SayRepeats(Now() + closes_.period());  // the counts not said yet (attack 94)
        stopping_ = true;
        for (auto& [id, c] : conns_) Close(*c, "");
        CloseHandles();
      });
      thread_.join();
    } else if (loop_ready_) {
      CloseHandles();  // Listen failed: no connection, no thread
      uv_run(&loop_, UV_RUN_DEFAULT);
    }
    if (loop_ready_) uv_loop_close(&loop_);
  }

  // Runs `task` on the loop thread and waits for it.
  void Run(std::function<void()> task) {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    Post([&] {
      task();
      std::lock_guard<std::mutex> lock(m);
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done; });
  }

  int port() const { return port_; }
  size_t connections() const { return conns_.size(); }

  // A new round of workers: empties their key space and closes the
  // connections that used it. Those are the earlier round's workers (the
  // new round's start only after this), and closing them ends their waits,
  // so a stale worker can neither read nor write the new round's keys.
  // Connections that have not used it yet (an agent between its AUTH and
  // its AGENT) stay.
  void ClearWorkers() {
    workers_.Clear();
    size_t closed = 0;
    std::set<std::string> hosts;
    for (auto& [id, c] : conns_) {
      if (c->agent || !c->used_workers || c->closing) continue;
      ++closed;
      hosts.insert(c->peer);
      Close(*c, "");
    }
    if (closed == 0) return;
    std::string from;
    for (const auto& h : hosts) from += (from.empty() ? "" : ", ") + h;
    Log("store: the workers' key space was cleared for a new round: closed " +
        std::to_string(closed) + " connection(s) of an earlier round's workers, from " + from);
  }

 private:
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      tasks_.push_back(std::move(task));
    }
    uv_async_send(&wake_);
  }

  void RunTasks() {
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t();
  }

  void Log(const std::string& message) {
    if (options_.log) options_.log(message);
  }

  static StoreGuard::Time Now() { return StoreGuard::Clock::now(); }

  Conn* Find(ClientId id) {
    auto it = conns_.find(id);
    return it == conns_.end() || it->second->closing ? nullptr : it->second.get();
  }

  void Accept() {
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
  void AcceptFailed(int status) {
    if (accept_error_ == status) return;
    accept_error_ = status;
    Log("store: accept on port " + std::to_string(port_) + ": " + std::strerror(-status) +
        ": a client was turned away (raise ulimit -n)");
  }

  void StartReading(Conn& c) {
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&c.tcp),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) {
          // One buffer for every read on this loop thread: reads are handled
          // one at a time, and the parser copies what it keeps.
          auto* server = static_cast<Conn*>(h->data)->server;
          *buf = uv_buf_init(server->read_buffer_.data(), server->read_buffer_.size());
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
          auto* cn = static_cast<Conn*>(s->data);
          if (n < 0) {
            cn->server->Close(*cn, "");
            return;
          }
          cn->server->Consume(*cn, std::string_view(buf->base, static_cast<size_t>(n)));
        });
  }

  static std::string PeerHost(const uv_tcp_t& tcp) {
    sockaddr_storage addr{};
    int len = sizeof(addr);
    if (uv_tcp_getpeername(&tcp, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
    return AddressString(addr);
  }

  // Feeds `data` to the connection's parser and dispatches each request. In
  // the handshake the parser is fed at most one byte over the bound, so an
  // unproved connection never holds more than that.
  void Consume(Conn& c, std::string_view data) {
    while (!data.empty() && !c.closing && !c.parked) {
      std::string_view part = data;
      bool handshake = c.stage != Stage::kReady;
      if (handshake) part = part.substr(0, guard_.HandshakeBytesLeft(c.id) + 1);
      const size_t offered = part.size();
      Request req;
      std::string error;
      ParseResult r = c.parser.Feed(&part, &req, &error);
      const size_t used = offered - part.size();
      data.remove_prefix(used);
      if (handshake && !guard_.CountHandshakeBytes(c.id, used)) {
        Close(c, "sent over " + std::to_string(guard_.limits().handshake_bytes) +
                     " bytes before finishing the handshake");
        return;
      }
      if (r == ParseResult::kError) {
        Close(c, "malformed request: " + error);
        return;
      }
      if (r == ParseResult::kOk) Dispatch(c, req);
    }
    if (c.parked && !c.closing) c.held.append(data);
  }

  void Dispatch(Conn& c, const Request& req) {
    if (c.stage == Stage::kNew) {
      Validate(c, req);
      return;
    }
    if (req.op == Op::kAuth) {
      Auth(c, req.values[0]);
      return;
    }
    if (c.stage != Stage::kReady && req.op != Op::kPing) {
      Close(c, "refused: the store needs the job token and no ddprun agent on host " + c.peer +
                   " has proved it");
      return;
    }
    if (req.op == Op::kAgent) {
      BecomeAgent(c);
      return;
    }
    if (req.op == Op::kClearWorkers) {
      if (!c.agent) {
        Close(c, "refused: CLEAR_WORKERS from a client that is not a ddprun agent");
        return;
      }
      ClearWorkers();
      Encoder e;
      Send(c.id, std::move(e.U8(kAuthOk).bytes()));
      return;
    }
    if (!c.agent && req.op != Op::kPing) c.used_workers = true;
    StoreState& state = c.agent ? agents_ : workers_;
    if (!state.Handle(c.id, req)) {
      if (!state.refusal().empty()) {
        Close(c, "refused: " + state.refusal());
        return;
      }
      Close(c, OpName(static_cast<uint8_t>(req.op)) + " is invalid here" +
                   (req.op == Op::kAdd ? " (ADD to a value that is not a number)"
                    : req.op == Op::kValidate || req.op == Op::kAuth
                        ? " (only a connection's first requests)"
                        : ""));
    }
  }

  // The agents' key space is for connections that proved the job token
  // themselves (any connection when the store has none): a worker admitted
  // by its host, or anyone without the token, never reaches it.
  void BecomeAgent(Conn& c) {
    if (!options_.token.empty() && !c.proved) {
      Close(c, "refused: AGENT from a connection that did not prove the job token itself");
      return;
    }
    workers_.Disconnect(c.id);  // waits it had there end
    c.agent = true;
    Encoder e;
    Send(c.id, std::move(e.U8(kAuthOk).bytes()));
  }

  void Validate(Conn& c, const Request& req) {
    if (req.op != Op::kValidate || req.word != kValidateMagic) {
      Close(c, "first request is " + OpName(static_cast<uint8_t>(req.op)) +
                   ", not VALIDATE with PyTorch's magic: not a torch >= 2.2 store client");
      return;
    }
    c.stage = Stage::kValidated;
    if (options_.token.empty() || admitted_hosts_.count(c.peer) != 0) BecomeReady(c);
  }

  void BecomeReady(Conn& c) {
    c.stage = Stage::kReady;
    guard_.Ready(c.id);
  }

  // Judges an AUTH now, or parks the connection until its host's turn: after
  // failed AUTHs a host's verdicts are spaced (StoreGuard), so a token cannot
  // be guessed faster than that, however many connections try.
  void Auth(Conn& c, const std::string& token) {
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

  void Judge(Conn& c, const std::string& token) {
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
  void Unpark(Conn& c) {
    c.parked = false;
    Judge(c, c.parked_token);
    if (c.closing) return;
    c.parked_token.clear();
    std::string held = std::move(c.held);
    c.held.clear();
    StartReading(c);
    Consume(c, held);
  }

  void OnTimer() {
    StoreGuard::Time now = Now();
    for (ClientId id : guard_.Expired(now)) {
      Conn* c = Find(id);
      if (!c) {
        guard_.Disconnect(id);
        continue;
      }
      Close(*c, c->stage == Stage::kNew
                    ? "sent no VALIDATE within " + Seconds(guard_.limits().handshake_timeout)
                    : "did not prove the job token within " +
                          Seconds(guard_.limits().handshake_timeout));
    }
    while (std::optional<ClientId> id = guard_.NextDueAuth(now)) {
      if (Conn* c = Find(*id)) Unpark(*c);
    }
    ArmTimer();
  }

  // Runs OnTimer at the guard's next deadline. A timer that fires early (a
  // connection left the handshake meanwhile) finds nothing and re-arms.
  void ArmTimer() {
    std::optional<StoreGuard::Time> next = guard_.NextDeadline();
    if (!next) {
      uv_timer_stop(&timer_);
      return;
    }
    auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - Now());
    uv_timer_start(
        &timer_, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->OnTimer(); },
        static_cast<uint64_t>(std::max<int64_t>(wait.count(), 0)), 0);
  }

  void Send(ClientId id, std::string bytes) {
    Conn* found = Find(id);
    if (!found) return;
    Conn& c = *found;
    if (c.out_pending == 0) {
      // The common case: the socket takes the reply at once, no allocation.
      uv_buf_t direct = uv_buf_init(bytes.data(), bytes.size());
      int n = uv_try_write(reinterpret_cast<uv_stream_t*>(&c.tcp), &direct, 1);
      if (n == static_cast<int>(bytes.size())) return;
      if (n > 0) bytes.erase(0, static_cast<size_t>(n));
    }
    auto w = std::make_unique<WriteReq>();
    w->data = std::move(bytes);
    w->conn = &c;
    w->req.data = w.get();
    // One reply, however large (a MULTI_GET of stored values), is not a sign
    // of a client that does not read: replies piling up behind it are.
    const bool behind = c.out_pending > 0;
    c.out_pending += w->data.size();
    uv_buf_t buf = uv_buf_init(w->data.data(), w->data.size());
    WriteReq* raw = w.release();  // owned by libuv until the callback
    uv_write(&raw->req, reinterpret_cast<uv_stream_t*>(&c.tcp), &buf, 1,
             [](uv_write_t* req, int status) {
               std::unique_ptr<WriteReq> owned(static_cast<WriteReq*>(req->data));
               owned->conn->out_pending -= owned->data.size();
               if (status < 0) owned->conn->server->Close(*owned->conn, "");
             });
    if (behind && c.out_pending > options_.limits.max_unsent) {
      Close(c, "does not read its replies (" + std::to_string(c.out_pending) + " bytes unsent)");
    }
  }

  void SayRepeats(StoreGuard::Time now) {
    const auto period = std::chrono::duration<double>(closes_.period());
    for (const auto& [text, more] : closes_.Due(now)) {
      Log("store: closed " + std::to_string(more) + " more client(s) in " +
          FormatSeconds(period.count()) + " s for the same reason: " + text);
    }
  }

  // The closes counted, not said (RepeatLimiter), are said as their period ends.
  void SayRepeatsLater() {
    const std::optional<StoreGuard::Time> next = closes_.NextDue();
    if (!next) return;
    auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - Now());
    uv_timer_start(
        &said_timer_,
        [](uv_timer_t* t) {
          auto* self = static_cast<Impl*>(t->data);
          self->SayRepeats(Now());
          self->SayRepeatsLater();
        },
        static_cast<uint64_t>(std::max<int64_t>(wait.count(), 0)), 0);
  }

  // Closes the server's own handles, each only if it was initialised (a
  // handle's type is set by its init, which a failed Listen may not have reached).
  void CloseHandles() {
    for (auto* h :
         {reinterpret_cast<uv_handle_t*>(&listener_), reinterpret_cast<uv_handle_t*>(&timer_),
          reinterpret_cast<uv_handle_t*>(&said_timer_), reinterpret_cast<uv_handle_t*>(&wake_)}) {
      if (h->type != UV_UNKNOWN_HANDLE && !uv_is_closing(h)) uv_close(h, nullptr);
    }
  }

  void Close(Conn& c, const std::string& why) {
    if (c.closing) return;
    c.closing = true;
    if (!why.empty() && !stopping_) {
      const std::string text = "client " + c.peer + ": " + why;
      if (closes_.Take(text, Now())) Log("store: closed " + text);
      SayRepeatsLater();
    }
    agents_.Disconnect(c.id);
    workers_.Disconnect(c.id);
    guard_.Disconnect(c.id);
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&c.tcp));
    uv_close(reinterpret_cast<uv_handle_t*>(&c.tcp), [](uv_handle_t* h) {
      auto* cn = static_cast<Conn*>(h->data);
      cn->server->conns_.erase(cn->id);  // frees the connection
    });
  }

  StoreServerOptions options_;
  StoreState agents_;   // the rendezvous: AGENT connections only
  StoreState workers_;  // everyone else: the workers' init_process_group
  StoreGuard guard_;
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

StoreServer::StoreServer(Key, std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreServer::~StoreServer() = default;

StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(StoreServerOptions options) {
  std::string where = options.host + ":" + std::to_string(options.port);
  auto fd = BindListener(options.host, options.port);
  if (!fd.ok()) return fd.status().Annotate("store: listen on " + where);
  auto port = LocalPort(fd->get());
  auto impl = std::make_unique<Impl>(std::move(options));
  if (Status s = impl->Listen(std::move(*fd), port); !s.ok()) return s.Annotate("store");
  return std::make_unique<StoreServer>(Key{}, std::move(impl));
}

int StoreServer::port() const { return impl_->port(); }

void StoreServer::ClearWorkers() {
  impl_->Run([this] { impl_->ClearWorkers(); });
}

size_t StoreServer::Connections() {
  size_t n = 0;
  impl_->Run([&] { n = impl_->connections(); });
  return n;
}

}  // namespace ddprun::rendezvous
