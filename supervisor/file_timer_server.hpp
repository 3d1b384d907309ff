// The torchelastic file timer's server (TORCHELASTIC_ENABLE_FILE_TIMER=1) on
// the supervisor's event loop: the named pipe that workers' FileTimerClient
// writes requests to (supervisor/file_timer.hpp), read without blocking, and
// one libuv timer for the earliest expiry. It only reports expiries; whether
// the pid is the job's, the signal and the failure are the supervisor's.
//
// Lifecycle: Create() makes the FIFO and starts reading. Close() stops it and
// removes the FIFO; the loop must then run (libuv's close callbacks) before
// the object is destroyed. Not thread-safe: use from the loop's thread.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.hpp"
#include "base/unique_fd.hpp"
#include "supervisor/file_timer.hpp"
#include "supervisor/pipe_stream.hpp"

namespace ddprun::supervisor {

class FileTimerServer {
  struct Key {
    explicit Key() = default;
  };

 public:
  using ExpiryFn = std::function<void(const ExpiredTimer&)>;

  explicit FileTimerServer(Key);  // use Create()
  // Makes the FIFO at `path` (mode 0600; a FIFO already there is replaced, as
  // torch does; any other file is refused with kInvalidArgument) and reads it
  // on `loop`. `on_expiry` is called on the loop for each expired timer.
  static StatusOr<std::unique_ptr<FileTimerServer>> Create(uv_loop_t* loop, const std::string& path,
                                                           ExpiryFn on_expiry);
  // REQUIRES: Close() was called and the loop ran since.
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  // Called on the loop before expiries are looked for: the place to
  // Postpone() by time that did not count (base/pause_clock.hpp).
  void SetBeforeExpiry(std::function<void()> before) { before_expiry_ = std::move(before); }
  // Every timer expires `by` later (TimerTable::Postpone).
  void Postpone(Duration by);
  // Drops every timer (a new round: the old workers are gone).
  void Clear();
  // Stops reading and timing, removes the FIFO. Idempotent.
  void Close();
  const std::string& path() const { return path_; }

 private:
  void OnData(std::string_view data);
  void OnLine(std::string_view line);
  void Malformed(const std::string& why, std::string_view line);
  void Arm();
  void OnTimer();

  std::string path_;
  ExpiryFn on_expiry_;
  std::function<void()> before_expiry_;
  UniqueFd keep_open_;  // a write end of our own: the read end never sees EOF
  PipeStream pipe_;
  uv_timer_t timer_{};
  bool open_ = false;  // the handles were initialized and not closed
  RequestLines lines_;
  TimerTable table_;
  size_t malformed_ = 0;
};

}  // namespace ddprun::supervisor
