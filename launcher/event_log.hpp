// The agent's event stream (--event_log_handler json|console, DDPRUN_EVENT_LOG;
// docs/machine-reports.md): one JSON object per line, as each event happens.
//
// A reader that stops reading never stops the agent. On ddprun's own stderr
// or stdout (also by a path to them, /dev/stderr) the lines go through the
// console's writer (supervisor/console.hpp), in order with ddprun's other
// lines. A file, pipe or terminal of its own is written by a thread of the
// event log: what its reader has not taken yet is held, up to a bound, and
// written as soon as it reads; the events past the bound are dropped and
// counted, and once the reader has taken the rest an `events_dropped` event
// says how many went missing. Each line is one write(2), so lines stay whole
// when several agents append to one file.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.hpp"

namespace ddprun::launcher {

// Bytes of events held for a reader that is behind, before events are dropped.
inline constexpr size_t kEventBacklogBytes = 1 << 20;

// Not thread-safe (one agent thread emits).
class EventLog {
 public:
  EventLog();  // writes nothing
  ~EventLog();
  EventLog(EventLog&&) noexcept;
  EventLog& operator=(EventLog&&) noexcept;

  // `handler` is --event_log_handler: "null" writes nothing unless `path` (DDPRUN_EVENT_LOG) is
  // set, "json" and "console" write to `path` (appended, created 0644) or else to stderr. Fails
  // naming the path when it cannot be opened, and on another handler.
  static StatusOr<EventLog> Open(const std::string& handler, const std::string& path);

  bool enabled() const;
  // Fields every later event carries (run_id, host, node_rank).
  void SetCommon(const std::string& key, nlohmann::ordered_json value) {
    common_[key] = std::move(value);
  }
  // {"schema", "time", "event", the common fields, then `fields`}. A failed
  // write is said once on the log and the stream stops. The "exit" event is
  // held past the bound (after the count of those dropped before it).
  void Emit(const std::string& event,
            const nlohmann::ordered_json& fields = nlohmann::ordered_json::object());
  // Waits until the reader has taken what is held, as long as it takes some
  // every `idle_limit` and for `limit` at most; says what is left unwritten.
  void Flush(std::chrono::milliseconds idle_limit, std::chrono::milliseconds limit);

  // Bytes held for the reader (the line being written included), and events
  // dropped since it last caught up (tests).
  size_t held_bytes() const;
  uint64_t dropped() const;

  struct Writer;  // the thread and what it holds (event_log.cpp)

 private:
  std::string Line(const std::string& event, const nlohmann::ordered_json& fields) const;

  int console_fd_ = -1;  // ddprun's own stderr or stdout: the console's writer
  std::string where_;
  std::shared_ptr<Writer> writer_;  // a file, pipe or terminal of its own
  nlohmann::ordered_json common_ = nlohmann::ordered_json::object();
};

}  // namespace ddprun::launcher
