#include "rendezvous/store_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <uv.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/unique_fd.hpp"
#include "rendezvous/sockets.hpp"
#include "rendezvous/store_state.hpp"

namespace ddprun::rendezvous {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

enum class Stage { kNew, kValidated, kReady };

}  // namespace

class StoreServer::Impl {
 public:
  struct Conn {
    uv_tcp_t tcp{};
    Impl* server = nullptr;
    ClientId id = 0;
    std::string peer;  // host address
    std::string in;
    size_t in_off = 0;
    size_t out_pending = 0;
    size_t parse_at = 0;  // unparsed bytes needed before parsing again
    Stage stage = Stage::kNew;
    bool closing = false;
  };

  struct WriteReq {
    uv_write_t req{};
    std::string data;
    Conn* conn = nullptr;
  };

  explicit Impl(StoreServerOptions options)
      : options_(std::move(options)),
        state_([this](ClientId c, std::string bytes) { Send(c, std::move(bytes)); }) {}

  Status Listen(UniqueFd fd, int port) {
    port_ = port;
    uv_loop_init(&loop_);
    uv_tcp_init(&loop_, &listener_);
    listener_.data = this;
    if (int rc = uv_tcp_open(&listener_, fd.get()); rc != 0) {
      return Internal(std::string("uv_tcp_open: ") + uv_strerror(rc));
    }
    fd.Release();
    int rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), SOMAXCONN,
                       [](uv_stream_t* s, int status) {
                         if (status == 0) static_cast<Impl*>(s->data)->Accept();
                       });
    if (rc != 0) return Internal(std::string("listen: ") + uv_strerror(rc));
    uv_async_init(&loop_, &wake_, [](uv_async_t* a) { static_cast<Impl*>(a->data)->RunTasks(); });
    wake_.data = this;
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
    return Status::Ok();
  }

  ~Impl() {
    if (!thread_.joinable()) return;
    Post([this] {
      stopping_ = true;
      for (auto& [id, c] : conns_) Close(*c, "");
      uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
      uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
    });
    thread_.join();
    uv_loop_close(&loop_);
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
  StoreState& state() { return state_; }
  size_t connections() const { return conns_.size(); }

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

  void Accept() {
    auto conn = std::make_unique<Conn>();
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
    uv_tcp_nodelay(&conn->tcp, 1);
    conn->peer = PeerHost(conn->tcp);
    Conn& c = *conn;
    conns_.emplace(c.id, std::move(conn));
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&c.tcp),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) {
          // One buffer for every read on this loop thread: reads are handled
          // one at a time, and the bytes are appended to the connection's own.
          auto* server = static_cast<Conn*>(h->data)->server;
          *buf = uv_buf_init(server->read_buffer_.data(), server->read_buffer_.size());
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
          auto* cn = static_cast<Conn*>(s->data);
          if (n < 0) {
            cn->server->Close(*cn, "");
            return;
          }
          cn->in.append(buf->base, static_cast<size_t>(n));
          cn->server->OnData(*cn);
        });
  }

  static std::string PeerHost(const uv_tcp_t& tcp) {
    sockaddr_storage addr{};
    int len = sizeof(addr);
    if (uv_tcp_getpeername(&tcp, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
    return AddressString(addr);
  }

  void OnData(Conn& c) {
    while (!c.closing) {
      std::string_view pending(c.in.data() + c.in_off, c.in.size() - c.in_off);
      if (pending.size() < c.parse_at) break;
      Request req;
      size_t used = 0;
      std::string error;
      ParseResult r = ParseRequest(pending, options_.limits, &req, &used, &error);
      if (r == ParseResult::kNeedMore) {
        c.parse_at = used;
        break;
      }
      c.parse_at = 0;
      if (r == ParseResult::kError) {
        Close(c, "malformed request: " + error);
        return;
      }
      c.in_off += used;
      Dispatch(c, req);
    }
    if (c.in_off > 0 && c.in_off * 2 >= c.in.size()) {
      c.in.erase(0, c.in_off);
      c.in_off = 0;
    }
    if (!c.closing && c.in.size() - c.in_off > options_.limits.max_buffered) {
      Close(c, "sent " + std::to_string(c.in.size() - c.in_off) +
                   " bytes that form no request (over the buffered-bytes limit)");
    }
  }

  void Dispatch(Conn& c, const Request& req) {
    if (c.stage == Stage::kNew) {
      if (req.op != Op::kValidate || req.word != kValidateMagic) {
        Close(c, "first request is " + OpName(static_cast<uint8_t>(req.op)) +
                     ", not VALIDATE with PyTorch's magic: not a torch >= 2.2 store client");
        return;
      }
      bool admitted = options_.token.empty() || admitted_hosts_.count(c.peer) != 0;
      c.stage = admitted ? Stage::kReady : Stage::kValidated;
      return;
    }
    if (req.op == Op::kAuth) {
      if (!options_.token.empty() && req.values[0] != options_.token) {
        Close(c, "refused: wrong job token");
        return;
      }
      admitted_hosts_.insert(c.peer);
      c.stage = Stage::kReady;
      Encoder e;
      Send(c.id, std::move(e.U8(kAuthOk).bytes()));
      return;
    }
    if (c.stage != Stage::kReady) {
      Close(c, "refused: the store needs the job token and no ddprun agent on host " + c.peer +
                   " has proved it");
      return;
    }
    if (!state_.Handle(c.id, req)) {
      Close(c, OpName(static_cast<uint8_t>(req.op)) + " is invalid here (ADD to a non-number?)");
    }
  }

  void Send(ClientId id, std::string bytes) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->closing) return;
    Conn& c = *it->second;
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
    c.out_pending += w->data.size();
    uv_buf_t buf = uv_buf_init(w->data.data(), w->data.size());
    WriteReq* raw = w.release();  // owned by libuv until the callback
    uv_write(&raw->req, reinterpret_cast<uv_stream_t*>(&c.tcp), &buf, 1,
             [](uv_write_t* req, int status) {
               std::unique_ptr<WriteReq> owned(static_cast<WriteReq*>(req->data));
               owned->conn->out_pending -= owned->data.size();
               if (status < 0) owned->conn->server->Close(*owned->conn, "");
             });
    if (c.out_pending > options_.limits.max_buffered) {
      Close(c, "does not read its replies (" + std::to_string(c.out_pending) + " bytes unsent)");
    }
  }

  void Close(Conn& c, const std::string& why) {
    if (c.closing) return;
    c.closing = true;
    if (!why.empty() && !stopping_) Log("store: closed client " + c.peer + ": " + why);
    state_.Disconnect(c.id);
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&c.tcp));
    uv_close(reinterpret_cast<uv_handle_t*>(&c.tcp), [](uv_handle_t* h) {
      auto* cn = static_cast<Conn*>(h->data);
      cn->server->conns_.erase(cn->id);  // frees the connection
    });
  }

  StoreServerOptions options_;
  StoreState state_;
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_async_t wake_{};
  std::thread thread_;
  std::mutex tasks_mu_;
  std::vector<std::function<void()>> tasks_;
  std::unordered_map<ClientId, std::unique_ptr<Conn>> conns_;
  std::unordered_set<std::string> admitted_hosts_;
  std::vector<char> read_buffer_ = std::vector<char>(kReadChunk);
  ClientId next_id_ = 1;
  int port_ = 0;
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

void StoreServer::Clear() {
  impl_->Run([this] { impl_->state().Clear(); });
}

size_t StoreServer::Connections() {
  size_t n = 0;
  impl_->Run([&] { n = impl_->connections(); });
  return n;
}

}  // namespace ddprun::rendezvous
