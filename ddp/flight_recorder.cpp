#include "ddp/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/unique_fd.hpp"
#include "env/names.hpp"

namespace ddprun::ddp {

namespace {

using env::kTraceMagic;
using env::kTraceMaxCapacity;
using env::kTraceVersion;
using env::TraceFileSize;
using FileHeader = env::TraceFileHeader;
using Mapping = env::TraceMapping;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Every shared field is stored with release and loaded with acquire (plain
// moves on x86-64): the reader (env/trace_file.cpp) lives in another process
// and may read at any time, and a reader that sees one field of a write then
// sees everything the writer stored before it. No fences, so ThreadSanitizer
// follows it too.
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
    // Entered before it was issued (ProcessGroup::Entering): kept as entered then.
    if (const TraceEntry* was = Owned(seq);
        was != nullptr && Get(was->state) == static_cast<uint32_t>(OpState::kEnqueued)) {
      return;
    }
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

std::unique_ptr<FlightRecorder> FlightRecorder::OpenForGroup(const std::string& path, int rank) {
  if (path.empty()) return nullptr;
  auto r = Open(path, rank);
  if (r.ok()) return std::move(*r);
  std::fprintf(stderr,
               "ddp: rank %d: no flight recorder: %s: training goes on, but a hang or timeout "
               "report will not show this rank's collectives\n",
               rank, r.status().message().c_str());
  return nullptr;
}

StatusOr<std::unique_ptr<FlightRecorder>> FlightRecorder::Open(const std::string& path, int rank,
                                                               uint32_t capacity) {
  const std::string what = "flight recorder " + path;
  if (path.empty()) return InvalidArgument("flight recorder: empty path");
  if (capacity == 0 || capacity > kTraceMaxCapacity) {
    return InvalidArgument(what + ": capacity " + std::to_string(capacity) + " is outside 1.." +
                           std::to_string(kTraceMaxCapacity));
  }
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus("open " + what, errno);
  if (ftruncate(fd.get(), static_cast<off_t>(TraceFileSize(capacity))) != 0) {
    return ErrnoStatus("ftruncate " + what, errno);
  }
  if (int err = posix_fallocate(fd.get(), 0, static_cast<off_t>(TraceFileSize(capacity)));
      err != 0 && err != EOPNOTSUPP && err != EINVAL) {  // filesystems without it: sparse
    unlink(path.c_str());
    return ErrnoStatus("allocate " + std::to_string(TraceFileSize(capacity)) + " bytes for " + what,
                       err);
  }
  auto map = Mapping::Map(fd.get(), TraceFileSize(capacity), PROT_READ | PROT_WRITE);
  if (!map.ok()) return map.status().Annotate(what);
  auto* h = reinterpret_cast<FileHeader*>(map->data());
  Put(h->version, kTraceVersion);
  Put(h->rank, static_cast<int32_t>(rank));
  Put(h->capacity, capacity);
  Put(h->entry_size, static_cast<uint32_t>(sizeof(TraceEntry)));
  // The magic goes last (a release store): a reader that sees it sees a
  // complete header.
  uint64_t magic;
  std::memcpy(&magic, kTraceMagic, sizeof(magic));
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
  return env::ReadTraceFile(path, rank);
}

namespace {

// Set by Finishing(): the file is gone, and the next beat creates it again.
std::atomic<bool> heartbeat_removed{false};

int OpenHeartbeat() {
  const char* path = std::getenv(env::kHeartbeatFile);
  if (path == nullptr || *path == '\0') return -1;
  return open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
}

}  // namespace

void Heartbeat() {
  // Opened once: a beat is then one system call, no allocation. The fd lives
  // as long as the process; O_CLOEXEC keeps it out of any child.
  static const int fd = OpenHeartbeat();
  if (fd < 0) return;
  if (heartbeat_removed.exchange(false)) {
    // Beating again after Finishing() (a new process group, more steps): the
    // file is created again, ddprun holds the rank to --hang_timeout again.
    // dup3 puts the new file behind the same number, so a beat of another
    // thread meanwhile touches the old file or the new one, never another.
    const int created = OpenHeartbeat();
    if (created >= 0) {
      dup3(created, fd, O_CLOEXEC);
      close(created);
    }
  }
  const timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  futimens(fd, now);  // utimensat(fd, NULL, ...): a failed beat is only a missed beat
}

void Finishing() {
  const char* path = std::getenv(env::kHeartbeatFile);
  if (path == nullptr || *path == '\0') return;
  heartbeat_removed.store(true);
  unlink(path);  // gone already: nothing was due
}

}  // namespace ddprun::ddp
