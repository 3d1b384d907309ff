#include "env/trace_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <utility>

#include "base/unique_fd.hpp"

namespace ddprun::env {

// The on-disk layout (docs/flight-recorder.md): a 64-byte header, then
// `capacity` TraceEntry slots of 64 bytes each, in host byte order.
static_assert(std::is_standard_layout_v<TraceEntry> && std::is_trivially_copyable_v<TraceEntry>);
static_assert(sizeof(TraceEntry) == 64);
static_assert(offsetof(TraceEntry, seq) == 0 && offsetof(TraceEntry, op) == 8 &&
              offsetof(TraceEntry, bytes) == 24 && offsetof(TraceEntry, dtype) == 32 &&
              offsetof(TraceEntry, state) == 36 && offsetof(TraceEntry, enqueued_ns) == 40 &&
              offsetof(TraceEntry, started_ns) == 48 && offsetof(TraceEntry, completed_ns) == 56);
static_assert(std::is_standard_layout_v<TraceFileHeader> && sizeof(TraceFileHeader) == 64);
static_assert(offsetof(TraceFileHeader, write_counter) == 24);

namespace {

constexpr int kReadTries = 8;  // per slot, while a writer is active

// The writer stores every shared field with release (ddp/flight_recorder.cpp);
// loads here are acquire, so a reader that sees one field of a write sees
// everything the writer stored before it.
template <typename T>
T Get(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_ACQUIRE);
}

// op[16] as two 8-byte words, as the writer stores it: never a torn word.
void GetOp(const TraceEntry& e, char (&op)[16]) {
  uint64_t w[2] = {Get(*reinterpret_cast<const uint64_t*>(e.op)),
                   Get(*reinterpret_cast<const uint64_t*>(e.op + 8))};
  std::memcpy(op, w, sizeof(w));
  op[15] = '\0';
}

// One consistent copy of `slot`, or false when it is empty or being written.
//
// The guard is the pair (state, seq). A writer rewriting a slot stores
// state = 0, then the fields, then seq, then the final state. The reader reads
// seq then state, copies the rest, and re-reads state then seq: if any field
// it copied came from a newer write, it then sees state 0 or the new write's
// state, and with that state the new seq, so the second pair differs from the
// first and the copy is torn. (Re-reading state alone is not enough: the new
// write may end in the state the old one had. And the first state must be read
// after the first seq: read before it, it may be the previous occupant's final
// state, equal to this write's, with this write's fields only half stored.)
// A state update without a new seq (Started, Finished) writes its timestamp
// before the state, so the copy may hold a timestamp the state does not cover
// yet; those are cleared.
bool ReadSlot(const TraceEntry& slot, TraceEntry* out) {
  const uint64_t seq = Get(slot.seq);
  const uint32_t state = Get(slot.state);
  if (state == 0) return false;
  TraceEntry e;
  GetOp(slot, e.op);
  e.bytes = Get(slot.bytes);
  e.dtype = Get(slot.dtype);
  e.enqueued_ns = Get(slot.enqueued_ns);
  e.started_ns = Get(slot.started_ns);
  e.completed_ns = Get(slot.completed_ns);
  if (Get(slot.state) != state || Get(slot.seq) != seq) return false;
  e.seq = seq;
  e.state = state;
  if (state < static_cast<uint32_t>(OpState::kStarted)) e.started_ns = 0;
  if (state < static_cast<uint32_t>(OpState::kCompleted)) e.completed_ns = 0;
  *out = e;
  return true;
}

// A copy of the header of a file another process may be writing.
TraceFileHeader LoadHeader(const TraceFileHeader& shared) {
  TraceFileHeader h{};
  const uint64_t magic = Get(*reinterpret_cast<const uint64_t*>(shared.magic));
  std::memcpy(h.magic, &magic, sizeof(magic));
  h.version = Get(shared.version);
  h.rank = Get(shared.rank);
  h.capacity = Get(shared.capacity);
  h.entry_size = Get(shared.entry_size);
  h.write_counter = Get(shared.write_counter);
  return h;
}

Status CheckHeader(const TraceFileHeader& h, size_t file_size) {
  if (file_size < sizeof(TraceFileHeader) ||
      std::memcmp(h.magic, kTraceMagic, sizeof(kTraceMagic)) != 0) {
    return InvalidArgument("not a flight recorder file (no DDPRTRC1 header)");
  }
  if (h.version != kTraceVersion || h.entry_size != sizeof(TraceEntry)) {
    return InvalidArgument("unsupported flight recorder version " + std::to_string(h.version) +
                           " (entry size " + std::to_string(h.entry_size) +
                           "): read it with the ddprun that wrote it");
  }
  if (h.capacity == 0 || h.capacity > kTraceMaxCapacity || file_size < TraceFileSize(h.capacity)) {
    return InvalidArgument("truncated flight recorder file: capacity " +
                           std::to_string(h.capacity) + " needs " +
                           std::to_string(TraceFileSize(h.capacity)) + " bytes, file has " +
                           std::to_string(file_size));
  }
  return Status::Ok();
}

// The entries of the ring, oldest first.
std::vector<TraceEntry> ReadSlots(const TraceEntry* slots, uint32_t capacity) {
  std::vector<TraceEntry> entries;
  for (uint32_t i = 0; i < capacity; ++i) {
    TraceEntry e;
    for (int t = 0; t < kReadTries; ++t) {
      if (ReadSlot(slots[i], &e)) {
        if (e.seq % capacity == i) entries.push_back(e);  // else: not written by a recorder
        break;
      }
      if (Get(slots[i].state) == 0) break;  // empty, or its writer died
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const TraceEntry& a, const TraceEntry& b) { return a.seq < b.seq; });
  return entries;
}

}  // namespace

std::string OpStateName(uint32_t state) {
  switch (static_cast<OpState>(state)) {
    case OpState::kEnqueued:
      return "enqueued";
    case OpState::kStarted:
      return "started";
    case OpState::kCompleted:
      return "completed";
    case OpState::kFailed:
      return "failed";
  }
  return "state " + std::to_string(state);
}

std::string TraceDTypeName(uint32_t dtype) {
  static const char* const kNames[] = {"float32", "float16", "bfloat16", "float64",
                                       "int32",   "int64",   "uint8"};
  if (dtype < std::size(kNames)) return kNames[dtype];
  return "dtype " + std::to_string(dtype);
}

TraceMapping::~TraceMapping() {
  if (addr_ != nullptr) munmap(addr_, size_);
}

TraceMapping::TraceMapping(TraceMapping&& o) noexcept
    : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}

StatusOr<TraceMapping> TraceMapping::Map(int fd, size_t size, int prot) {
  void* addr = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return ErrnoStatus("mmap", errno);
  return TraceMapping(addr, size);
}

// The writer never shrinks its file once created, so the mapping stays valid;
// a file truncated under the reader by something else would raise SIGBUS.
StatusOr<std::vector<TraceEntry>> ReadTraceFile(const std::string& path, int* rank) {
  const std::string what = "flight recorder " + path;
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + what, errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + what, errno);
  const auto size = static_cast<size_t>(st.st_size);
  if (size < sizeof(TraceFileHeader)) return CheckHeader(TraceFileHeader{}, size).Annotate(what);
  auto map = TraceMapping::Map(fd.get(), size, PROT_READ);
  if (!map.ok()) return map.status().Annotate(what);
  const TraceFileHeader h = LoadHeader(*reinterpret_cast<const TraceFileHeader*>(map->data()));
  if (Status s = CheckHeader(h, size); !s.ok()) return s.Annotate(what);
  if (rank != nullptr) *rank = h.rank;
  return ReadSlots(reinterpret_cast<const TraceEntry*>(map->data() + sizeof(TraceFileHeader)),
                   h.capacity);
}

}  // namespace ddprun::env
