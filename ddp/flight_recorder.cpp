#include "ddp/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "base/unique_fd.hpp"
#include "env/names.hpp"

namespace ddprun::ddp {

// The on-disk layout (docs/flight-recorder.md): a 64-byte header, then
// `capacity` TraceEntry slots of 64 bytes each, in host byte order.
static_assert(std::is_standard_layout_v<TraceEntry> && std::is_trivially_copyable_v<TraceEntry>);
static_assert(sizeof(TraceEntry) == 64);
static_assert(offsetof(TraceEntry, seq) == 0 && offsetof(TraceEntry, op) == 8 &&
              offsetof(TraceEntry, bytes) == 24 && offsetof(TraceEntry, dtype) == 32 &&
              offsetof(TraceEntry, state) == 36 && offsetof(TraceEntry, enqueued_ns) == 40 &&
              offsetof(TraceEntry, started_ns) == 48 && offsetof(TraceEntry, completed_ns) == 56);

namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'R', 'T', 'R', 'C', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxCapacity = 1u << 20;  // 64 MiB of entries
constexpr int kReadTries = 8;                // per slot, while a writer is active

struct FileHeader {
  char magic[8];           // "DDPRTRC1", written last by Open
  uint32_t version;        // kVersion
  int32_t rank;            // the writer's global rank
  uint32_t capacity;       // number of slots
  uint32_t entry_size;     // sizeof(TraceEntry)
  uint64_t write_counter;  // Enqueued calls so far
  char reserved[32];
};
static_assert(std::is_standard_layout_v<FileHeader> && sizeof(FileHeader) == 64);
static_assert(offsetof(FileHeader, write_counter) == 24);

size_t FileSize(uint32_t capacity) {
  return sizeof(FileHeader) + size_t{capacity} * sizeof(TraceEntry);
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Every shared field is stored with release and loaded with acquire (plain
// moves on x86-64): the reader lives in another process and may read at any
// time, and a reader that sees one field of a write then sees everything the
// writer stored before it. No fences, so ThreadSanitizer follows it too.
template <typename T>
void Put(T& field, T value) {
  __atomic_store_n(&field, value, __ATOMIC_RELEASE);
}
template <typename T>
T Get(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_ACQUIRE);
}

// op[16] as two 8-byte words, so that a reader never sees a torn word.
void PutOp(TraceEntry& e, const char* op) {
  char buf[16] = {};
  if (op != nullptr) std::strncpy(buf, op, sizeof(buf) - 1);  // always NUL-terminated
  uint64_t w[2];
  std::memcpy(w, buf, sizeof(w));
  Put(*reinterpret_cast<uint64_t*>(e.op), w[0]);
  Put(*reinterpret_cast<uint64_t*>(e.op + 8), w[1]);
}

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
// state then seq, copies the rest, and re-reads state then seq: if any field
// it copied came from a newer write, it then sees state 0 or the new write's
// state, and with that state the new seq, so the second pair differs from the
// first and the copy is torn. (Re-reading state alone is not enough: the new
// write may end in the state the old one had.)
// A state update without a new seq (Started, Finished) writes its timestamp
// before the state, so the copy may hold a timestamp the state does not cover
// yet; those are cleared.
bool ReadSlot(const TraceEntry& slot, TraceEntry* out) {
  const uint32_t state = Get(slot.state);
  if (state == 0) return false;
  const uint64_t seq = Get(slot.seq);
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

// A read-only or read-write mapping of a whole file, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~Mapping() {
    if (addr_ != nullptr) munmap(addr_, size_);
  }
  Mapping(Mapping&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Mapping& operator=(Mapping&&) = delete;

  static StatusOr<Mapping> Map(int fd, size_t size, int prot) {
    void* addr = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) return ErrnoStatus("mmap", errno);
    return Mapping(addr, size);
  }

  char* data() const { return static_cast<char*>(addr_); }
  size_t size() const { return size_; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// A copy of the header of a file another process may be writing.
FileHeader LoadHeader(const FileHeader& shared) {
  FileHeader h{};
  const uint64_t magic = Get(*reinterpret_cast<const uint64_t*>(shared.magic));
  std::memcpy(h.magic, &magic, sizeof(magic));
  h.version = Get(shared.version);
  h.rank = Get(shared.rank);
  h.capacity = Get(shared.capacity);
  h.entry_size = Get(shared.entry_size);
  h.write_counter = Get(shared.write_counter);
  return h;
}

Status CheckHeader(const FileHeader& h, size_t file_size) {
  if (file_size < sizeof(FileHeader) || std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgument("not a flight recorder file (no DDPRTRC1 header)");
  }
  if (h.version != kVersion || h.entry_size != sizeof(TraceEntry)) {
    return InvalidArgument("unsupported flight recorder version " + std::to_string(h.version) +
                           " (entry size " + std::to_string(h.entry_size) +
                           "): read it with the ddprun that wrote it");
  }
  if (h.capacity == 0 || h.capacity > kMaxCapacity || file_size < FileSize(h.capacity)) {
    return InvalidArgument(
        "truncated flight recorder file: capacity " + std::to_string(h.capacity) + " needs " +
        std::to_string(FileSize(h.capacity)) + " bytes, file has " + std::to_string(file_size));
  }
  return Status::Ok();
}

}  // namespace

class FlightRecorder::Impl {
 public:
  explicit Impl(Mapping m)
      : map_(std::move(m)),
        header_(reinterpret_cast<FileHeader*>(map_.data())),
        slots_(reinterpret_cast<TraceEntry*>(map_.data() + sizeof(FileHeader))),
        capacity_(header_->capacity) {}

  // The slot of `seq` if it still holds `seq` (the ring may have moved on).
  TraceEntry* Owned(uint64_t seq) {
    TraceEntry* e = &slots_[seq % capacity_];
    if (Get(e->state) == 0 || Get(e->seq) != seq) return nullptr;
    return e;
  }

  void Enqueued(uint64_t seq, const char* op, uint64_t bytes, DType dtype) {
    TraceEntry& e = slots_[seq % capacity_];
    Put(e.state, uint32_t{0});  // before any new field (each store is a release)
    PutOp(e, op);
    Put(e.bytes, bytes);
    Put(e.dtype, static_cast<uint32_t>(dtype));
    Put(e.enqueued_ns, NowNs());
    Put(e.started_ns, int64_t{0});
    Put(e.completed_ns, int64_t{0});
    Put(e.seq, seq);
    Put(e.state, static_cast<uint32_t>(OpState::kEnqueued));
    __atomic_fetch_add(&header_->write_counter, 1, __ATOMIC_RELEASE);
  }

  void Started(uint64_t seq) {
    TraceEntry* e = Owned(seq);
    if (e == nullptr) return;
    Put(e->started_ns, NowNs());
    Put(e->state, static_cast<uint32_t>(OpState::kStarted));
  }

  void Finished(uint64_t seq, bool ok) {
    TraceEntry* e = Owned(seq);
    if (e == nullptr) return;
    Put(e->completed_ns, NowNs());
    OpState s = ok ? OpState::kCompleted : OpState::kFailed;
    Put(e->state, static_cast<uint32_t>(s));
  }

 private:
  Mapping map_;
  FileHeader* header_;
  TraceEntry* slots_;
  uint32_t capacity_;
};

FlightRecorder::FlightRecorder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FlightRecorder::~FlightRecorder() = default;

StatusOr<std::unique_ptr<FlightRecorder>> FlightRecorder::Open(const std::string& path, int rank,
                                                               uint32_t capacity) {
  const std::string what = "flight recorder " + path;
  if (path.empty()) return InvalidArgument("flight recorder: empty path");
  if (capacity == 0 || capacity > kMaxCapacity) {
    return InvalidArgument(what + ": capacity " + std::to_string(capacity) + " is outside 1.." +
                           std::to_string(kMaxCapacity));
  }
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus("open " + what, errno);
  if (ftruncate(fd.get(), static_cast<off_t>(FileSize(capacity))) != 0) {
    return ErrnoStatus("ftruncate " + what, errno);
  }
  auto map = Mapping::Map(fd.get(), FileSize(capacity), PROT_READ | PROT_WRITE);
  if (!map.ok()) return map.status().Annotate(what);
  auto* h = reinterpret_cast<FileHeader*>(map->data());
  Put(h->version, kVersion);
  Put(h->rank, static_cast<int32_t>(rank));
  Put(h->capacity, capacity);
  Put(h->entry_size, static_cast<uint32_t>(sizeof(TraceEntry)));
  // The magic goes last (a release store): a reader that sees it sees a
  // complete header.
  uint64_t magic;
  std::memcpy(&magic, kMagic, sizeof(magic));
  Put(*reinterpret_cast<uint64_t*>(h->magic), magic);
  return std::unique_ptr<FlightRecorder>(
      new FlightRecorder(std::make_unique<Impl>(std::move(*map))));
}

void FlightRecorder::Enqueued(uint64_t seq, const char* op, uint64_t bytes, DType dtype) {
  impl_->Enqueued(seq, op, bytes, dtype);
}
void FlightRecorder::Started(uint64_t seq) { impl_->Started(seq); }
void FlightRecorder::Finished(uint64_t seq, bool ok) { impl_->Finished(seq, ok); }

// The writer never shrinks its file once created, so the mapping stays valid;
// a file truncated under the reader by something else would raise SIGBUS.
StatusOr<std::vector<TraceEntry>> FlightRecorder::Read(const std::string& path, int* rank) {
  const std::string what = "flight recorder " + path;
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + what, errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + what, errno);
  const auto size = static_cast<size_t>(st.st_size);
  if (size < sizeof(FileHeader)) return CheckHeader(FileHeader{}, size).Annotate(what);
  auto map = Mapping::Map(fd.get(), size, PROT_READ);
  if (!map.ok()) return map.status().Annotate(what);
  const FileHeader h = LoadHeader(*reinterpret_cast<const FileHeader*>(map->data()));
  if (Status s = CheckHeader(h, size); !s.ok()) return s.Annotate(what);
  if (rank != nullptr) *rank = h.rank;

  const auto* slots = reinterpret_cast<const TraceEntry*>(map->data() + sizeof(FileHeader));
  std::vector<TraceEntry> entries;
  for (uint32_t i = 0; i < h.capacity; ++i) {
    TraceEntry e;
    for (int t = 0; t < kReadTries; ++t) {
      if (ReadSlot(slots[i], &e)) {
        if (e.seq % h.capacity == i) entries.push_back(e);  // else: not written by a recorder
        break;
      }
      if (Get(slots[i].state) == 0) break;  // empty, or its writer died
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const TraceEntry& a, const TraceEntry& b) { return a.seq < b.seq; });
  return entries;
}

void Heartbeat() {
  // Opened once: a beat is then one system call, no allocation. The fd lives
  // as long as the process; O_CLOEXEC keeps it out of any child.
  static const int fd = [] {
    const char* path = std::getenv(env::kHeartbeatFile);
    if (path == nullptr || *path == '\0') return -1;
    return open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  }();
  if (fd < 0) return;
  const timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  futimens(fd, now);  // utimensat(fd, NULL, ...): a failed beat is only a missed beat
}

}  // namespace ddprun::ddp
