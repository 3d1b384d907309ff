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

namespace {

// `size` bytes of the file at `offset`, or an errno status; a file shorter
// than that (truncated under the reader) gives kInvalidArgument.
StatusOr<std::vector<char>> ReadAt(int fd, off_t offset, size_t size, const std::string& what) {
  std::vector<char> buf(size);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, buf.data() + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + what, errno);
    if (n == 0) return InvalidArgument(what + ": truncated while being read");
    done += static_cast<size_t>(n);
  }
  return buf;
}

}  // namespace

// Read with pread, never mapped: reading the holes of a sparse file through a
// mapping raises SIGBUS where the filesystem cannot back them (a full tmpfs),
// and killed the launcher (found by an attacking helper).
//
// The guard is the pair (state, seq). A writer rewriting a slot stores
// state = 0, then the fields, then seq, then the final state. The reader reads
// seq then state, copies the rest, and re-reads state then seq (here five
// whole-ring passes, each read(2) after the last): if any field
// it copied came from a newer write, it then sees state 0 or the new write's
// state, and with that state the new seq, so the second pair differs from the
// first and the copy is torn. (Re-reading state alone is not enough: the new
// write may end in the state the old one had. And the first state must be read
// after the first seq: read before it, it may be the previous occupant's final
// state, equal to this write's, with this write's fields only half stored.)
// A state update without a new seq (Started, Finished) writes its timestamp
// before the state, so the copy may hold a timestamp the state does not cover
// yet; those are cleared.
//
// A slot torn in every one of kReadTries rounds of passes is skipped.
StatusOr<std::vector<TraceEntry>> ReadTraceFile(const std::string& path, int* rank) {
  const std::string what = "flight recorder " + path;
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + what, errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + what, errno);
  const auto size = static_cast<size_t>(st.st_size);
  if (size < sizeof(TraceFileHeader)) return CheckHeader(TraceFileHeader{}, size).Annotate(what);
  auto head = ReadAt(fd.get(), 0, sizeof(TraceFileHeader), what);
  if (!head.ok()) return head.status();
  const TraceFileHeader h = LoadHeader(*reinterpret_cast<const TraceFileHeader*>(head->data()));
  if (Status s = CheckHeader(h, size); !s.ok()) return s.Annotate(what);
  if (rank != nullptr) *rank = h.rank;
  const size_t ring = size_t{h.capacity} * sizeof(TraceEntry);
  std::vector<TraceEntry> entries;
  std::vector<uint32_t> pending(h.capacity);  // the slots still to read
  for (uint32_t i = 0; i < h.capacity; ++i) pending[i] = i;
  for (int t = 0; t < kReadTries && !pending.empty(); ++t) {
    std::vector<std::vector<TraceEntry>> pass(5, std::vector<TraceEntry>(h.capacity));
    for (auto& p : pass) {
      auto bytes = ReadAt(fd.get(), sizeof(TraceFileHeader), ring, what);
      if (!bytes.ok()) return bytes.status();
      std::memcpy(p.data(), bytes->data(), ring);
    }
    std::vector<uint32_t> torn;
    for (uint32_t i : pending) {
      const TraceEntry& fields = pass[2][i];
      const uint64_t seq = pass[0][i].seq;
      const uint32_t state = pass[1][i].state;
      if (state == 0) continue;  // empty, or its writer died mid-write
      if (pass[3][i].state != state || pass[4][i].seq != seq) {
        torn.push_back(i);
        continue;
      }
      TraceEntry e = fields;
      e.op[15] = '\0';
      e.seq = seq;
      e.state = state;
      if (state < static_cast<uint32_t>(OpState::kStarted)) e.started_ns = 0;
      if (state < static_cast<uint32_t>(OpState::kCompleted)) e.completed_ns = 0;
      if (e.seq % h.capacity == i) entries.push_back(e);  // else: not written by a recorder
    }
    pending = std::move(torn);
  }
  std::sort(entries.begin(), entries.end(),
            [](const TraceEntry& a, const TraceEntry& b) { return a.seq < b.seq; });
  return entries;
}

}  // namespace ddprun::env
