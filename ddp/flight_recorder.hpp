// The flight recorder: every collective of a process group in a fixed-size
// ring in a memory-mapped file (DDPRUN_TRACE_FILE), readable by another
// process while this one is stuck or after it died. Layout in
// docs/flight-recorder.md.
//
// Thread-safety: Record*/Update* may be called from the group's threads;
// writes are single-producer per entry and published with release stores.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "ddp/tensor.hpp"

namespace ddprun::ddp {

enum class OpState : uint32_t { kEnqueued = 1, kStarted = 2, kCompleted = 3, kFailed = 4 };

struct TraceEntry {
  uint64_t seq = 0;
  char op[16] = {};  // "allreduce", "broadcast"
  uint64_t bytes = 0;
  uint32_t dtype = 0;       // DType
  uint32_t state = 0;       // OpState
  int64_t enqueued_ns = 0;  // CLOCK_REALTIME
  int64_t started_ns = 0;
  int64_t completed_ns = 0;
};

class FlightRecorder {
 public:
  // Creates (or truncates) `path` with room for `capacity` entries.
  static StatusOr<std::unique_ptr<FlightRecorder>> Open(const std::string& path, int rank,
                                                        uint32_t capacity = 1024);
  ~FlightRecorder();

  void Enqueued(uint64_t seq, const char* op, uint64_t bytes, DType dtype);
  void Started(uint64_t seq);
  void Finished(uint64_t seq, bool ok);

  // Reads a recorder file written by any process: the header's rank and the
  // entries still in the ring, oldest first.
  static StatusOr<std::vector<TraceEntry>> Read(const std::string& path, int* rank = nullptr);

  class Impl;

 private:
  explicit FlightRecorder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Touches DDPRUN_HEARTBEAT_FILE (its mtime is the beat); cheap enough for
// every step. A no-op without the variable.
void Heartbeat();

}  // namespace ddprun::ddp
