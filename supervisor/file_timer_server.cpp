#include "supervisor/file_timer_server.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

namespace ddprun::supervisor {

namespace {

constexpr size_t kReadSize = 64 * 1024;
// The expiration times are wall-clock (the clients' time.time()), the timer
// is monotonic: a long wait is cut into steps of at most this, so that a step
// of the wall clock delays an expiry by at most this much.
constexpr std::chrono::milliseconds kMaxWait{1000};

// Replaces a FIFO left at `path`; refuses to remove anything else.
Status MakeFifo(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) return InvalidArgument(path + " exists and is not a named pipe");
    if (unlink(path.c_str()) != 0) return ErrnoStatus("remove the old named pipe " + path, errno);
  }
  if (mkfifo(path.c_str(), 0600) != 0) return ErrnoStatus("mkfifo " + path, errno);
  return Status::Ok();
}

}  // namespace

FileTimerServer::FileTimerServer(Key) {}

StatusOr<std::unique_ptr<FileTimerServer>> FileTimerServer::Create(uv_loop_t* loop,
                                                                   const std::string& path,
                                                                   ExpiryFn on_expiry) {
  if (Status s = MakeFifo(path); !s.ok()) return s;
  auto server = std::make_unique<FileTimerServer>(Key{});
  server->path_ = path;
  server->on_expiry_ = std::move(on_expiry);
  // The read end first: opening a FIFO's write end without blocking fails
  // (ENXIO) while nobody reads it.
  UniqueFd read_end(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!read_end.valid()) {
    const int err = errno;
    unlink(path.c_str());
    return ErrnoStatus("open " + path + " for reading", err);
  }
  server->keep_open_ = UniqueFd(open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  if (!server->keep_open_.valid()) {
    const int err = errno;
    unlink(path.c_str());
    return ErrnoStatus("open " + path + " for writing", err);
  }
  uv_timer_init(loop, &server->timer_);
  server->timer_.data = server.get();
  server->open_ = true;
  FileTimerServer* self = server.get();
  Status read = server->pipe_.Open(
      loop, read_end.Release(), kReadSize, [self](std::string_view d) { self->OnData(d); },
      // EOF cannot happen while keep_open_ is held; any other error ends reading.
      [self](int error) {
        spdlog::error("file timer: read {}: {}; timers are no longer served", self->path_,
                      uv_strerror(error));
      });
  if (!read.ok()) {
    server->Close();
    uv_run(loop, UV_RUN_NOWAIT);  // the close callbacks, while the handles still exist
    return read.Annotate("read " + path + " on the event loop");
  }
  return server;
}

FileTimerServer::~FileTimerServer() { Close(); }

void FileTimerServer::Close() {
  if (!open_) return;
  open_ = false;
  pipe_.Close();  // closes the read end
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  keep_open_.Reset();
  unlink(path_.c_str());
}

void FileTimerServer::Clear() {
  table_.Clear();
  if (open_) uv_timer_stop(&timer_);
}

void FileTimerServer::Postpone(Duration by) {
  table_.Postpone(by);
  Arm();
}

void FileTimerServer::OnData(std::string_view data) {
  lines_.Feed(
      data, [this](std::string_view line) { OnLine(line); },
      [this] { Malformed("longer than " + std::to_string(kMaxTimerRequest) + " bytes", ""); });
  Arm();
}

void FileTimerServer::OnLine(std::string_view line) {
  auto request = ParseTimerRequest(line);
  if (!request.ok()) {
    Malformed(request.status().message(), line);
    return;
  }
  spdlog::debug("file timer: pid {} {} '{}'", request->pid,
                request->expires ? "acquired" : "released", request->scope);
  table_.Apply(*request, std::chrono::system_clock::now());
}

// The first is a warning; the rest go to the debug log, so a broken client
// cannot flood the launcher's output.
void FileTimerServer::Malformed(const std::string& why, std::string_view line) {
  constexpr size_t kShown = 200;
  const std::string shown(line.substr(0, kShown));
  if (malformed_++ == 0) {
    spdlog::warn(
        "file timer: ignored a malformed request on {}: {}{}{} (further ones are logged at "
        "debug level); requests are written by torch.distributed.elastic.timer."
        "FileTimerClient",
        path_, why, shown.empty() ? "" : ": ", shown);
  } else {
    spdlog::debug("file timer: ignored malformed request {}: {}: {}", malformed_, why, shown);
  }
}

void FileTimerServer::Arm() {
  if (!open_) return;
  const auto next = table_.NextExpiry();
  if (!next) {
    uv_timer_stop(&timer_);
    return;
  }
  using std::chrono::milliseconds;
  auto wait = std::chrono::ceil<milliseconds>(*next - std::chrono::system_clock::now());
  wait = std::clamp(wait, milliseconds(0), kMaxWait);
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<FileTimerServer*>(t->data)->OnTimer(); },
      static_cast<uint64_t>(wait.count()), 0);
}

void FileTimerServer::OnTimer() {
  if (before_expiry_) before_expiry_();
  // Releases already in the FIFO count first: after ddprun was stopped, the
  // loop runs this timer before it reads them.
  pipe_.ReadNow();
  for (const ExpiredTimer& e : table_.TakeExpired(std::chrono::system_clock::now())) {
    on_expiry_(e);
  }
  Arm();
}

}  // namespace ddprun::supervisor
