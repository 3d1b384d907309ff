// The flight recorder: every collective of a process group in a fixed-size
// ring in a memory-mapped file (DDPRUN_TRACE_FILE), readable by another
// process while this one is stuck or after it died. Layout in
// docs/flight-recorder.md and env/trace_file.hpp.
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
#include "env/trace_file.hpp"

namespace ddprun::ddp {

// The file layout and its reader live in env/trace_file.hpp (the launcher
// reads these files without depending on ddp/).
using env::OpState;
using env::TraceEntry;

class FlightRecorder {
 public:
  // Creates (or truncates) `path` with room for `capacity` entries, its
  // blocks allocated at once: a mapped page the filesystem cannot back later
  // (a full disk) would kill the process with SIGBUS mid-training.
  static StatusOr<std::unique_ptr<FlightRecorder>> Open(const std::string& path, int rank,
                                                        uint32_t capacity = 1024);
  // Open(path, rank), for a process group: "" gives none; a failure is said
  // on stderr (the path, why, what is lost) and gives none, since training
  // goes on without its record.
  static std::unique_ptr<FlightRecorder> OpenForGroup(const std::string& path, int rank);
  ~FlightRecorder();

  void Enqueued(uint64_t seq, const char* op, uint64_t bytes, DType dtype);
  void Started(uint64_t seq);
  void Finished(uint64_t seq, bool ok);

  // Reads a recorder file written by any process: the header's rank and the
  // entries still in the ring, oldest first. Same as env::ReadTraceFile.
  static StatusOr<std::vector<TraceEntry>> Read(const std::string& path, int* rank = nullptr);

  class Impl;

 private:
  explicit FlightRecorder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Touches DDPRUN_HEARTBEAT_FILE (its mtime is the beat); cheap enough for
// every step. A no-op without the variable.
void Heartbeat();

// Says the worker is finishing (its last step done, its teardown to come):
// removes DDPRUN_HEARTBEAT_FILE, so ddprun awaits its exit for --exit_timeout
// instead of a beat within --hang_timeout. A beat after it creates the file
// again: the worker is running again. A no-op without the variable.
void Finishing();

}  // namespace ddprun::ddp
