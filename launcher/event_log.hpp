// The agent's event stream (--event_log_handler json|console, DDPRUN_EVENT_LOG;
// docs/machine-reports.md): one JSON object per line, as each event happens.
//
// A reader that stops reading never stops the agent. On ddprun's own stderr
// or stdout the lines go through the console's writer (supervisor/console.hpp),
// in order with ddprun's other lines. A pipe, socket or terminal of its own is
// written without blocking: what its reader has not taken yet is held, up to a
// bound; the events past it are dropped and counted, and once the reader has
// taken the rest an `events_dropped` event says how many went missing. A
// regular file is written with one write(2) per line, so lines stay whole when
// several agents append to one file.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.hpp"
#include "base/unique_fd.hpp"

namespace ddprun::launcher {

// Bytes of events held for a reader that is behind, before events are dropped.
inline constexpr size_t kEventBacklogBytes = 1 << 20;

// Not thread-safe.
class EventLog {
 public:
  EventLog() = default;  // writes nothing
  // `handler` is --event_log_handler: "null" writes nothing unless `path` (DDPRUN_EVENT_LOG) is
  // set, "json" and "console" write to `path` (appended, created 0644) or else to stderr. Fails
  // naming the path when it cannot be opened, and on another handler.
  static StatusOr<EventLog> Open(const std::string& handler, const std::string& path);

  bool enabled() const { return fd_ >= 0; }
  // Fields every later event carries (run_id, host, node_rank).
  void SetCommon(const std::string& key, nlohmann::ordered_json value) {
    common_[key] = std::move(value);
  }
  // {"schema", "time", "event", the common fields, then `fields`}. A failed
  // write is said once on the log and the stream stops. The "exit" event is
  // held past the bound (with the count of those dropped before it).
  void Emit(const std::string& event,
            const nlohmann::ordered_json& fields = nlohmann::ordered_json::object());
  // Writes what is held for a reader that is behind, as long as it takes some
  // every `idle_limit` and for `limit` at most; says what is left unwritten.
  void Flush(std::chrono::milliseconds idle_limit, std::chrono::milliseconds limit);

  // Bytes held for the reader, and events dropped since it last caught up (tests).
  size_t held_bytes() const { return held_.size() - sent_; }
  uint64_t dropped() const { return dropped_; }

 private:
  std::string Line(const std::string& event, const nlohmann::ordered_json& fields) const;
  void Hold(const std::string& line, bool last);
  void WriteHeld();
  void Fail(const std::string& why);

  UniqueFd owned_;
  int fd_ = -1;
  bool console_ = false;      // ddprun's own stderr or stdout: the console's writer
  bool nonblocking_ = false;  // a pipe, socket or terminal of its own
  std::string where_;
  std::string held_;      // events for the reader (nonblocking_), from sent_ on
  size_t sent_ = 0;       // bytes of held_ written already
  uint64_t dropped_ = 0;  // events dropped since the reader last caught up
  nlohmann::ordered_json common_ = nlohmann::ordered_json::object();
};

}  // namespace ddprun::launcher
