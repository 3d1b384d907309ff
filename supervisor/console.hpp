// The launcher's console (its stdout and stderr), written so that a console
// nobody reads never stops supervision.
//
// Each destination has a writer thread and a bounded queue, and nothing here
// blocks. When the queue is full (a pager left open, Ctrl-S, a stuck log
// shipper), lines that a log file also keeps are dropped and counted (on a
// regular file, which only falls behind for a moment, only once a write is
// stuck), and
// once the console reads again a notice says how many it missed and where
// they are kept ("[ddprun: 12345 lines not shown: console not reading; see
// <log>]"). Lines kept nowhere else are never dropped: WriteOrHold() queues
// them and tells the caller to stop reading their source (the worker then
// waits to write, as it would writing to the console itself) until the
// room notifier says the console has read half the queue. Log files are
// written by the supervisor directly; they stay complete.
//
// The writers live as long as the process (never destroyed), so a writer
// blocked in write() at exit is no hazard.
#pragma once

#include <spdlog/sinks/sink.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::supervisor {

class ConsoleWriter {
 public:
  // The writer of `fd`: one per file, so fds 1 and 2 on one terminal or pipe
  // (`2>&1`) share one.
  static ConsoleWriter& For(int fd);

  // Queues `data` (whole lines); drops and counts them when the queue is full,
  // unless the console is a regular file (it never stalls: queued, and false
  // returned at the bound as by WriteOrHold). `where_kept` names where dropped
  // lines can be read instead (a log file or directory), "" when nowhere.
  bool Write(std::string_view data, std::string_view where_kept = {});
  // Queues `data` (whole lines, or a line's piece), which nothing else keeps,
  // whatever the queue holds. Returns false when the queue is now at its
  // bound: the caller stops producing until the room notifier runs.
  bool WriteOrHold(std::string_view data);
  // Run on the writer's thread when a queue WriteOrHold() found full has
  // room again (half its bound free), or the console was given up. The
  // notifier must be thread-safe (uv_async_send); nullptr removes it.
  void SetRoomNotifier(std::function<void()> notify);
  // Queues `text` (whole lines) from a line start: a worker's unfinished line
  // shown just before it (a progress bar) is ended first. For the launcher's
  // own messages and reports, which may fill the queue to twice its bound
  // before they are dropped: the workers' output does not crowd them out.
  void WriteOwnLine(std::string_view text);
  // Waits until everything queued is written, as long as the console takes
  // some of it every `idle_limit`; false when it took none for that long.
  bool Flush(std::chrono::milliseconds idle_limit);

  // Chunks written to the console since the start: its progress.
  uint64_t chunks_written() const;
  // Lines dropped since the start.
  uint64_t dropped_lines() const;
  // Whether a write has been in flight for seconds (a file on a server that
  // went away): a console that is a regular file then drops kept lines again.
  bool stuck() const;
  // Whether lines that no log file keeps are queued (or being written) on a
  // console that can still take them.
  bool holds_unkept() const;
  // Bytes queued, including the chunk being written.
  size_t queued_bytes() const;
  // The errno of the write that failed (nothing is written after it); 0 if none.
  int write_error() const;
  // How many times a line of the launcher's own (WriteOwnLine, a dropped-lines
  // notice) ended an unfinished line: the worker's rest then starts a line.
  const std::atomic<uint64_t>& own_line_breaks() const;
  // The queue bound in bytes (tests and benchmarks set a small one).
  void set_capacity(size_t bytes);

  struct State;

 private:
  explicit ConsoleWriter(int fd);
  // Queues `data`; drops it when the queue is full, unless `keep`. Returns
  // whether the queue has room left.
  bool Put(std::string_view data, std::string_view where_kept, bool own_line, bool keep);
  State* state_;
};

// Flushes both console writers at once, as long as one of them takes some
// of what is queued every `idle_limit`. With `wait_for_unkept` (at exit), a
// console that holds lines no log file keeps is waited for without bound
// after that, said once on the other stream where that one takes output (a
// terminating signal ends the launcher: supervisor/late_signals.hpp).
void FlushConsole(std::chrono::milliseconds idle_limit, bool wait_for_unkept = false);

// ddprun's stdout and stderr whose writes failed for a reason other than a
// closed reader (EPIPE: `| head` is not an error): "stdout: No space left on
// device", one for a file both go to.
std::vector<std::string> FailedConsoles();

// A spdlog sink that writes through ConsoleWriter::For(2), with the level in
// colour when stderr is a terminal.
std::shared_ptr<spdlog::sinks::sink> ConsoleLogSink();

}  // namespace ddprun::supervisor
