#include "rendezvous/store_server.hpp"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "base/format.hpp"
#include "base/no_thread.hpp"
#include "rendezvous/sockets.hpp"
#include "rendezvous/store_server_impl.hpp"

namespace ddprun::rendezvous {

// On failure the loop thread never started; the destructor closes what was set up.
Status StoreServer::Impl::Listen(UniqueFd fd, int port) {
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
  rc =
      uv_async_init(&loop_, &wake_, [](uv_async_t* a) { static_cast<Impl*>(a->data)->RunTasks(); });
  if (rc != 0) return ErrnoStatus("uv_async_init", -rc);
  wake_.data = this;
  try {
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  } catch (const std::system_error& e) {
    return Unavailable(std::string("start the store thread: ") + e.what() + WhyNoThread());
  }
  return Status::Ok();
}

StoreServer::Impl::~Impl() {
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
void StoreServer::Impl::Run(std::function<void()> task) {
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

// A new round of workers: empties their key space and closes the
// connections that used it. Those are the earlier round's workers (the
// new round's start only after this), and closing them ends their waits,
// so a stale worker can neither read nor write the new round's keys.
// Connections that have not used it yet (an agent between its AUTH and
// its AGENT) stay.
void StoreServer::Impl::ClearWorkers() {
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

void StoreServer::Impl::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks_.push_back(std::move(task));
  }
  uv_async_send(&wake_);
}

void StoreServer::Impl::RunTasks() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
}

void StoreServer::Impl::Log(const std::string& message) {
  if (options_.log) options_.log(message);
}

void StoreServer::Impl::StartReading(Conn& c) {
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

// Feeds `data` to the connection's parser and dispatches each request. In
// the handshake the parser is fed at most one byte over the bound, so an
// unproved connection never holds more than that.
void StoreServer::Impl::Consume(Conn& c, std::string_view data) {
  const std::string_view first = data;
  while (!data.empty() && !c.closing && !c.parked && !c.paused) {
    if (!replies_.MayRead(c.id)) {
      Pause(c);
      break;
    }
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
      const std::string foreign = c.stage == Stage::kNew ? ForeignProtocol(first) : "";
      Close(c, foreign.empty() ? "malformed request: " + error
                               : "sent " + foreign +
                                     ", not a TCPStore client's VALIDATE: this port is ddprun's "
                                     "store (MASTER_PORT, the rendezvous endpoint), for PyTorch's "
                                     "TCPStore and ddprun only");
      return;
    }
    if (r == ParseResult::kOk && MustWait(c, req)) {
      c.waiting = std::move(req);
      Pause(c);
    } else if (r == ParseResult::kOk) {
      Dispatch(c, req);
    }
  }
  if ((c.parked || c.paused) && !c.closing) c.held.append(data);
}

// Past the bound on unread replies, a request whose reply would be large
// waits (ReplyBudget); the handshake's never do.
bool StoreServer::Impl::MustWait(const Conn& c, const Request& req) const {
  if (c.stage != Stage::kReady || !replies_.over()) return false;
  return !replies_.MayMake((c.agent ? agents_ : workers_).ReplySize(req));
}

// Reads no more of `c` until the replies allow (ResumeReaders): what it
// sent meanwhile stays in the kernel, and one chunk read already in `held`.
void StoreServer::Impl::Pause(Conn& c) {
  c.paused = true;
  paused_.push_back(c.id);
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&c.tcp));
}

// Paused connections go on, in the order they paused, as far as the replies
// allow: one paused again goes behind those still waiting (fair turns).
void StoreServer::Impl::ResumeReaders() {
  std::deque<ClientId> order;
  order.swap(paused_);
  std::deque<ClientId> still;
  for (ClientId id : order) {
    Conn* c = Find(id);
    if (c == nullptr || !c->paused) continue;  // gone, or listed twice
    if (!replies_.MayRead(id) || (c->waiting && MustWait(*c, *c->waiting))) {
      still.push_back(id);
      continue;
    }
    c->paused = false;
    if (c->waiting) {
      const Request req = std::move(*c->waiting);
      c->waiting.reset();
      Dispatch(*c, req);
      if (c->closing) continue;
    }
    ReadAgain(*c);
  }
  paused_.insert(paused_.begin(), still.begin(), still.end());
}

// Reading starts again, with the bytes held while it had stopped.
void StoreServer::Impl::ReadAgain(Conn& c) {
  std::string held = std::move(c.held);
  c.held.clear();
  StartReading(c);
  Consume(c, held);
}

void StoreServer::Impl::Dispatch(Conn& c, const Request& req) {
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
                 (req.op == Op::kValidate || req.op == Op::kAuth
                      ? " (only a connection's first requests)"
                      : ""));
  }
}

// Over the replies' bound: each holder's progress is looked at, and those
// that took nothing for a while are closed (ReplyBudget).
void StoreServer::Impl::CloseStalledReaders(StoreGuard::Time now) {
  if (!replies_.over()) return;
  for (ClientId id : replies_.Holders()) {
    if (Conn* c = Find(id)) CountUnsent(*c, now);
  }
  const size_t total = replies_.total();
  for (ClientId id : replies_.Stalled(now)) {
    if (Conn* c = Find(id)) {
      Close(*c, "does not read its replies: " + std::to_string(replies_.held(id)) +
                    " bytes unsent, none taken for " +
                    FormatSeconds(
                        std::chrono::duration<double>(replies_.limits().stalled_after).count()) +
                    " s" + ", while the store held " + std::to_string(total) +
                    " bytes of unread replies (the limit is " +
                    std::to_string(replies_.limits().max_total) + ")");
    }
  }
  // Those waiting go on as the closed replies are freed (Send's callback).
}

// What `c`'s replies hold, and how much of them its peer has not taken: in
// libuv's queue, and in the kernel's unacknowledged (SIOCOUTQ). libuv's queue
// alone moved in steps of a third of the socket buffer: a reader of 250 KiB/s
// looked stalled (attack 96).
void StoreServer::Impl::CountUnsent(Conn& c, StoreGuard::Time now) {
  size_t untaken = 0;
  if (!c.closing) {
    auto* stream = reinterpret_cast<uv_stream_t*>(&c.tcp);
    untaken = uv_stream_get_write_queue_size(stream);
    uv_os_fd_t fd = -1;
    int in_kernel = 0;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(stream), &fd) == 0 &&
        ioctl(fd, SIOCOUTQ, &in_kernel) == 0 && in_kernel > 0) {
      untaken += static_cast<size_t>(in_kernel);
    }
  }
  replies_.Update(c.id, c.out_pending, untaken, now);
}

void StoreServer::Impl::Send(ClientId id, std::string bytes) {
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
             Conn& c = *owned->conn;
             c.out_pending -= owned->data.size();
             owned.reset();  // freed before another reply is made (the bound's promise)
             if (status < 0) c.server->Close(c, "");
             c.server->CountUnsent(c, Now());
             c.server->ResumeReaders();
           });
  if (behind && c.out_pending > options_.limits.max_unsent) {
    Close(c, "does not read its replies (" + std::to_string(c.out_pending) + " bytes unsent)");
    return;
  }
  const bool was_over = replies_.over();
  CountUnsent(c, Now());
  if (replies_.over() && !was_over) ArmTimer();
}

void StoreServer::Impl::SayRepeats(StoreGuard::Time now) {
  const auto period = std::chrono::duration<double>(closes_.period());
  for (const auto& [text, more] : closes_.Due(now)) {
    Log("store: closed " + std::to_string(more) + " more client(s) in " +
        FormatSeconds(period.count()) + " s for the same reason: " + text);
  }
}

// The closes counted, not said (RepeatLimiter), are said as their period ends.
void StoreServer::Impl::SayRepeatsLater() {
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
void StoreServer::Impl::CloseHandles() {
  for (auto* h :
       {reinterpret_cast<uv_handle_t*>(&listener_), reinterpret_cast<uv_handle_t*>(&timer_),
        reinterpret_cast<uv_handle_t*>(&said_timer_), reinterpret_cast<uv_handle_t*>(&wake_)}) {
    if (h->type != UV_UNKNOWN_HANDLE && !uv_is_closing(h)) uv_close(h, nullptr);
  }
}

void StoreServer::Impl::Close(Conn& c, const std::string& why) {
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
  replies_.Closing(c.id);  // its replies count until its writes are cancelled, freeing them
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&c.tcp));
  uv_close(reinterpret_cast<uv_handle_t*>(&c.tcp), [](uv_handle_t* h) {
    auto* cn = static_cast<Conn*>(h->data);
    cn->server->replies_.Remove(cn->id);
    cn->server->conns_.erase(cn->id);  // frees the connection
  });
}

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
