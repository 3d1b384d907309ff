// The flight recorder's trace file (DDPRUN_TRACE_FILE): the on-disk layout
// shared by the writer (ddp/flight_recorder) and every reader (the DDP core's
// tests, the supervisor's hang analysis), and the reader itself. The layout and
// the lock-free guard protocol are specified in docs/flight-recorder.md §2.
//
// Lives in env/ because it is part of the launcher-worker contract: the
// launcher reads these files and must not depend on ddp/.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.hpp"

namespace ddprun::env {

enum class OpState : uint32_t { kEnqueued = 1, kStarted = 2, kCompleted = 3, kFailed = 4 };

// One slot of the ring, 64 bytes (offsets static_assert'ed in trace_file.cpp).
struct TraceEntry {
  uint64_t seq = 0;
  char op[16] = {};  // "allreduce", "broadcast"; NUL-terminated
  uint64_t bytes = 0;
  uint32_t dtype = 0;        // ddp::DType: 0 float32 .. 6 uint8
  uint32_t state = 0;        // OpState; 0 = empty or being written
  int64_t enqueued_ns = 0;   // CLOCK_REALTIME
  int64_t started_ns = 0;    // 0 before kStarted
  int64_t completed_ns = 0;  // 0 before kCompleted / kFailed
};

// The 64-byte header at offset 0.
struct TraceFileHeader {
  char magic[8];           // kTraceMagic, written last by the writer
  uint32_t version;        // kTraceVersion
  int32_t rank;            // the writer's global rank
  uint32_t capacity;       // number of slots
  uint32_t entry_size;     // sizeof(TraceEntry)
  uint64_t write_counter;  // Enqueued calls so far (informational)
  char reserved[32];
};

inline constexpr char kTraceMagic[8] = {'D', 'D', 'P', 'R', 'T', 'R', 'C', '1'};
inline constexpr uint32_t kTraceVersion = 1;
inline constexpr uint32_t kTraceMaxCapacity = 1u << 20;  // 64 MiB of entries

// Header plus `capacity` slots.
inline size_t TraceFileSize(uint32_t capacity) {
  return sizeof(TraceFileHeader) + size_t{capacity} * sizeof(TraceEntry);
}

// "enqueued", "started", "completed", "failed", or "state N".
std::string OpStateName(uint32_t state);
// "float32" .. "uint8" (ddp::DType order), or "dtype N".
std::string TraceDTypeName(uint32_t dtype);

// Reads a trace file written by any process, live or dead: the header's rank
// (into `*rank` when not null) and the entries still in the ring, oldest
// first. Slots caught mid-write are retried and then skipped (the guard
// protocol, docs/flight-recorder.md §2.3). Fails with the path in the message:
// kNotFound for a missing file, kInvalidArgument for a file that is not a
// trace file, of another version or truncated, errno codes otherwise.
// Thread-safe; reads the file with pread, never mapping it (a mapped hole of
// a sparse file on a full tmpfs raises SIGBUS).
StatusOr<std::vector<TraceEntry>> ReadTraceFile(const std::string& path, int* rank = nullptr);

// A MAP_SHARED mapping of a whole file, unmapped on destruction. Move-only.
class TraceMapping {
 public:
  TraceMapping() = default;
  ~TraceMapping();
  TraceMapping(TraceMapping&& o) noexcept;
  TraceMapping& operator=(TraceMapping&&) = delete;

  // mmap(fd, size, prot, MAP_SHARED); the fd may be closed afterwards.
  static StatusOr<TraceMapping> Map(int fd, size_t size, int prot);

  char* data() const { return static_cast<char*>(addr_); }
  size_t size() const { return size_; }

 private:
  TraceMapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ddprun::env
