// Supervisor::PipeReader: reads one worker stream through a pipe and routes it
// by line to its log file, the console, the duplicate filter's file and the
// failure report's tail. Private to the supervisor.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "base/unique_fd.hpp"
#include "supervisor/console.hpp"
#include "supervisor/line_filter.hpp"
#include "supervisor/line_splitter.hpp"
#include "supervisor/pipe_stream.hpp"
#include "supervisor/shown_stream.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::supervisor {

struct Supervisor::PipeReader {
  PipeReader(Supervisor* owner, size_t worker, StreamSpec spec, ConsoleWriter* console,
             ConsoleTurn* turn)
      : owner(owner),
        worker(worker),
        spec(std::move(spec)),
        console(console),
        filter(this->spec.duplicate_filters, this->spec.fallback_prefix),  // always the rank's
        shown(this->spec.prefix, turn) {}

  PipeStream pipe;
  Supervisor* owner;
  size_t worker;  // index into the group's workers
  StreamSpec spec;
  ConsoleWriter* console;
  UniqueFd file;
  // `file` keeps what it is given (a regular file; not /dev/null, which
  // --log_dir=/dev/null gives, nor a FIFO): then the console may drop it.
  bool keeps = false;
  int filter_fd = -1;
  LineFilter filter;
  LineSplitter splitter;
  ShownStream shown;
  std::string out;  // console bytes of one read, queued at once
  // Output nothing else keeps waits for the console: the pipe is not read
  // (the worker waits to write) since `held_since`, until Resume().
  std::chrono::steady_clock::time_point held_since{};
  // The workers are gone (Drain): what their pipes hold is queued whole.
  bool draining = false;
  // Since when the incomplete line has had bytes not shown (max() when not).
  std::chrono::steady_clock::time_point unshown_since =
      std::chrono::steady_clock::time_point::max();

  void Consume(std::string_view data);
  void Finish();
  bool held() const { return pipe.paused(); }
  // Reads again (the console has room, or the workers are gone).
  void Resume() { pipe.Resume(); }
  // Shows the incomplete line's new bytes if they have waited since `before`
  // or longer; returns since when what is left has waited (max() for nothing).
  std::chrono::steady_clock::time_point ShowWaiting(std::chrono::steady_clock::time_point before);

 private:
  void Line(std::string_view line);
  void Flush();
};

}  // namespace ddprun::supervisor
