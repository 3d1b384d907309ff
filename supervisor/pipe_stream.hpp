// The read end of a pipe on a libuv loop, read a chunk at a time into a
// buffer of its own, for the supervisor's worker streams and the file timer's
// FIFO.
//
// Lifecycle: Open() starts reading; Pause() and Resume() hold it; Close() stops it and closes the
// handle (and the fd); the loop must then run until closed() before the object is destroyed. It
// must not move while open. Not thread-safe: the loop's thread.
#pragma once

#include <uv.h>

#include <functional>
#include <string>
#include <string_view>

#include "base/status.hpp"

namespace ddprun::supervisor {

class PipeStream {
 public:
  using DataFn = std::function<void(std::string_view)>;
  // The end of reading: UV_EOF, or the libuv error that stopped it. Reading
  // has stopped; Close() is still the owner's to call.
  using EndFn = std::function<void(int error)>;

  PipeStream() = default;
  PipeStream(const PipeStream&) = delete;
  PipeStream& operator=(const PipeStream&) = delete;

  // Takes `fd` (closed with the handle, also on failure) and reads it on
  // `loop`, `chunk` bytes at most per call of `on_data`. On failure the
  // handle is closing: run the loop before destroying this.
  Status Open(uv_loop_t* loop, int fd, size_t chunk, DataFn on_data, EndFn on_end);
  // Reads what the pipe holds now, through `on_data`, without waiting for the
  // loop (which, resumed after a stop, runs its timers before it reads).
  // Needs a non-blocking fd; does nothing unless reading.
  void ReadNow();
  // Stops reading for now (the pipe fills and its writer waits), and starts
  // again. Pause() may be called from `on_data`: no more data comes after it.
  void Pause();
  void Resume();
  bool paused() const { return paused_; }
  // Stops reading and closes the handle. Idempotent.
  void Close();
  // Open() was called and Close() not yet.
  bool reading() const { return initialized_ && !closing_; }
  // No handle left (never opened, or closed and the loop ran since).
  bool closed() const { return !initialized_; }

 private:
  uv_pipe_t pipe_{};
  std::string buffer_;
  size_t chunk_ = 0;
  DataFn on_data_;
  EndFn on_end_;
  bool initialized_ = false;
  bool closing_ = false;
  bool paused_ = false;

  int StartReading();
};

}  // namespace ddprun::supervisor
