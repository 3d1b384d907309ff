#include "supervisor/pipe_stream.hpp"

#include <unistd.h>

#include <utility>

namespace ddprun::supervisor {

Status PipeStream::Open(uv_loop_t* loop, int fd, size_t chunk, DataFn on_data, EndFn on_end) {
  chunk_ = chunk;
  on_data_ = std::move(on_data);
  on_end_ = std::move(on_end);
  uv_pipe_init(loop, &pipe_, 0);  // cannot fail for a pipe without IPC
  pipe_.data = this;
  initialized_ = true;
  closing_ = false;
  paused_ = false;
  if (int rc = uv_pipe_open(&pipe_, fd); rc != 0) {
    close(fd);
    Close();
    return ErrnoStatus("uv_pipe_open", -rc);
  }
  if (int rc = StartReading(); rc != 0) {
    Close();
    return ErrnoStatus("uv_read_start", -rc);
  }
  return Status::Ok();
}

int PipeStream::StartReading() {
  auto alloc = [](uv_handle_t* h, size_t, uv_buf_t* buf) {
    auto* self = static_cast<PipeStream*>(h->data);
    self->buffer_.resize(self->chunk_);
    *buf = uv_buf_init(self->buffer_.data(), static_cast<unsigned>(self->chunk_));
  };
  auto read = [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
    auto* self = static_cast<PipeStream*>(s->data);
    if (n > 0) self->on_data_(std::string_view(buf->base, static_cast<size_t>(n)));
    if (n < 0) {
      uv_read_stop(s);
      self->on_end_(static_cast<int>(n));
    }
  };
  return uv_read_start(reinterpret_cast<uv_stream_t*>(&pipe_), alloc, read);
}

void PipeStream::Pause() {
  if (!reading() || paused_) return;
  paused_ = true;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&pipe_));
}

void PipeStream::Resume() {
  if (!paused_) return;
  paused_ = false;
  if (!reading()) return;
  if (int rc = StartReading(); rc != 0) on_end_(rc);  // as a read error would end it
}

void PipeStream::ReadNow() {
  if (!reading() || paused_) return;
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&pipe_), &fd) != 0) return;
  buffer_.resize(chunk_);
  while (!paused_) {
    const ssize_t n = read(fd, buffer_.data(), chunk_);
    if (n <= 0) return;  // empty (EAGAIN), or an end the loop's own read reports
    on_data_(std::string_view(buffer_.data(), static_cast<size_t>(n)));
  }
}

void PipeStream::Close() {
  if (!initialized_ || closing_) return;
  closing_ = true;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&pipe_));
  uv_close(reinterpret_cast<uv_handle_t*>(&pipe_),
           [](uv_handle_t* h) { static_cast<PipeStream*>(h->data)->initialized_ = false; });
}

}  // namespace ddprun::supervisor
