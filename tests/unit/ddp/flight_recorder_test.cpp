#include "ddp/flight_recorder.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

namespace ddprun::ddp {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ddprun_fr_" + std::to_string(getpid()) + "_" + name))
      .string();
}

std::unique_ptr<FlightRecorder> MustOpen(const std::string& path, int rank, uint32_t capacity) {
  auto fr = FlightRecorder::Open(path, rank, capacity);
  REQUIRE_MESSAGE(fr.ok(), fr.status().message());
  return std::move(*fr);
}

// The ops of the round-trip and fork tests: seq s moves s*100 bytes; every
// third one fails, the others complete, the last one is left started.
void WriteOps(FlightRecorder& fr, uint64_t first, uint64_t count) {
  for (uint64_t s = first; s < first + count; ++s) {
    fr.Enqueued(s, s % 2 == 0 ? "allreduce" : "broadcast", s * 100, DType::kFloat16);
    fr.Started(s);
    if (s + 1 < first + count) fr.Finished(s, s % 3 != 0);
  }
}

TEST_CASE("flight recorder entries round-trip through the file") {
  const std::string path = TempPath("roundtrip.bin");
  auto fr = MustOpen(path, 5, 16);
  WriteOps(*fr, 0, 4);
  fr->Enqueued(4, "a-very-long-op-name-indeed", 1, DType::kInt64);  // truncated to 15 chars

  int rank = -1;
  auto entries = FlightRecorder::Read(path, &rank);
  REQUIRE(entries.ok());
  CHECK(rank == 5);
  REQUIRE(entries->size() == 5);
  for (uint64_t s = 0; s < 4; ++s) {
    const TraceEntry& e = (*entries)[s];
    CHECK(e.seq == s);
    CHECK(std::string(e.op) == (s % 2 == 0 ? "allreduce" : "broadcast"));
    CHECK(e.bytes == s * 100);
    CHECK(e.dtype == static_cast<uint32_t>(DType::kFloat16));
    CHECK(e.enqueued_ns > 0);
    CHECK(e.started_ns >= e.enqueued_ns);
  }
  CHECK((*entries)[0].state == static_cast<uint32_t>(OpState::kFailed));
  CHECK((*entries)[1].state == static_cast<uint32_t>(OpState::kCompleted));
  CHECK((*entries)[1].completed_ns >= (*entries)[1].started_ns);
  CHECK((*entries)[3].state == static_cast<uint32_t>(OpState::kStarted));
  CHECK((*entries)[3].completed_ns == 0);
  CHECK(std::string((*entries)[4].op) == "a-very-long-op-");
  CHECK((*entries)[4].state == static_cast<uint32_t>(OpState::kEnqueued));
  CHECK((*entries)[4].started_ns == 0);
  std::filesystem::remove(path);
}

TEST_CASE("a collective entered before it is issued keeps the time it was entered") {
  // ProcessGroup::Entering (the DETAIL check waits before issuing): the
  // issue's own Enqueued does not restart the entry; a later use of the slot does.
  const std::string path = TempPath("entered.bin");
  auto fr = MustOpen(path, 0, 4);
  fr->Enqueued(1, "allreduce", 8, DType::kFloat32);
  auto first = FlightRecorder::Read(path);
  REQUIRE(first.ok());
  REQUIRE(first->size() == 1);
  const int64_t entered = (*first)[0].enqueued_ns;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  fr->Enqueued(1, "allreduce", 8, DType::kFloat32);
  auto again = FlightRecorder::Read(path);
  REQUIRE(again.ok());
  CHECK((*again)[0].enqueued_ns == entered);
  fr->Started(1);
  fr->Finished(1, true);
  fr->Enqueued(5, "broadcast", 4, DType::kUInt8);  // the same slot, a new collective
  auto later = FlightRecorder::Read(path);
  REQUIRE(later.ok());
  REQUIRE(later->size() == 1);
  CHECK((*later)[0].seq == 5);
  CHECK((*later)[0].enqueued_ns > entered);
  std::filesystem::remove(path);
}

TEST_CASE("the ring keeps the last capacity entries, oldest first") {
  const std::string path = TempPath("wrap.bin");
  auto fr = MustOpen(path, 0, 4);
  WriteOps(*fr, 0, 10);
  fr->Finished(2, true);  // overwritten by seq 6: ignored
  auto entries = FlightRecorder::Read(path);
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 4);
  for (uint64_t i = 0; i < 4; ++i) CHECK((*entries)[i].seq == 6 + i);
  CHECK((*entries)[0].state == static_cast<uint32_t>(OpState::kFailed));  // 6 % 3 == 0
  CHECK((*entries)[3].state == static_cast<uint32_t>(OpState::kStarted));
  std::filesystem::remove(path);
}

TEST_CASE("a reader in another process sees the entries while the writer keeps its mapping") {
  const std::string path = TempPath("fork.bin");
  auto fr = MustOpen(path, 3, 8);
  WriteOps(*fr, 100, 5);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Exit codes: 0 ok, 10 read failed, 11 wrong rank, 12 wrong count, 13 wrong entry.
    int rank = -1;
    auto entries = FlightRecorder::Read(path, &rank);
    if (!entries.ok()) _exit(10);
    if (rank != 3) _exit(11);
    if (entries->size() != 5) _exit(12);
    for (uint64_t i = 0; i < 5; ++i) {
      const TraceEntry& e = (*entries)[i];
      if (e.seq != 100 + i || e.bytes != (100 + i) * 100) _exit(13);
    }
    if ((*entries)[4].state != static_cast<uint32_t>(OpState::kStarted)) _exit(13);
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::filesystem::remove(path);
}

TEST_CASE("a reader skips empty, torn and foreign slots") {
  const std::string path = TempPath("torn.bin");
  auto fr = MustOpen(path, 0, 4);
  WriteOps(*fr, 0, 3);
  {
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const uint32_t writing = 0;  // slot 1 caught mid-write by a dying writer
    CHECK(pwrite(fd, &writing, 4, 64 + 1 * 64 + 36) == 4);
    const uint64_t foreign = 7;  // slot 2 holds a seq that does not belong there
    CHECK(pwrite(fd, &foreign, 8, 64 + 2 * 64) == 8);
    close(fd);
  }
  auto entries = FlightRecorder::Read(path);
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 1);
  CHECK((*entries)[0].seq == 0);
  std::filesystem::remove(path);
}

TEST_CASE("a recorder is allocated whole; one that cannot be made leaves the group without one") {
  const std::string path = TempPath("whole.bin");
  auto r = FlightRecorder::Open(path, 0, 64);
  REQUIRE(r.ok());
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  // Its blocks are there now (no hole for a full disk to turn into SIGBUS later).
  CHECK(static_cast<size_t>(st.st_blocks) * 512 >= env::TraceFileSize(64));
  std::filesystem::remove(path);
  CHECK(FlightRecorder::OpenForGroup("", 0) == nullptr);
  CHECK(FlightRecorder::OpenForGroup("/nonexistent-dir/trace.bin", 3) == nullptr);  // said
}

// Read with pread: a sparse file (holes where no slot was written) reads as its written slots.
TEST_CASE("a sparse recorder file reads as the slots written in it") {
  const std::string path = TempPath("sparse.bin");
  {
    auto r = FlightRecorder::Open(path, 2, 256);
    REQUIRE(r.ok());
    (*r)->Enqueued(0, "allreduce", 4, DType::kFloat32);
    (*r)->Finished(0, true);
  }
  // Holes from the second page on: slot 0 stays, the rest read as zeros (empty).
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096,
                    static_cast<off_t>(env::TraceFileSize(256)) - 4096) == 0);
  close(fd);
  int rank = -1;
  auto entries = FlightRecorder::Read(path, &rank);
  REQUIRE(entries.ok());
  CHECK(rank == 2);
  REQUIRE(entries->size() == 1);
  CHECK(std::string((*entries)[0].op) == "allreduce");
  CHECK((*entries)[0].state == static_cast<uint32_t>(OpState::kCompleted));
  std::filesystem::remove(path);
}

TEST_CASE("reading a file that is not a flight recorder fails with the path") {
  const std::string path = TempPath("bogus.bin");
  {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    CHECK(write(fd, "hello", 5) == 5);
    close(fd);
  }
  auto r = FlightRecorder::Read(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find(path) != std::string::npos);
  CHECK(r.status().message().find("not a flight recorder file") != std::string::npos);
  CHECK_FALSE(FlightRecorder::Read(TempPath("missing.bin")).ok());
  CHECK_FALSE(FlightRecorder::Open(path, 0, 0).ok());
  std::filesystem::remove(path);
}

TEST_CASE("a concurrent reader only ever sees consistent entries") {
  const std::string path = TempPath("race.bin");
  auto fr = MustOpen(path, 0, 2);  // few slots: the writer rewrites what the reader reads
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t s = 0; s < 2000000; ++s) {
      fr->Enqueued(s, s % 2 == 0 ? "allreduce" : "broadcast", s * 3, DType::kFloat32);
      fr->Started(s);
      fr->Finished(s, true);
    }
    done = true;
  });
  int bad = 0;
  int reads = 0;
  while (!done || reads == 0) {
    auto entries = FlightRecorder::Read(path);
    REQUIRE(entries.ok());
    ++reads;
    for (const TraceEntry& e : *entries) {
      const bool ok = e.bytes == e.seq * 3 &&
                      std::string(e.op) == (e.seq % 2 == 0 ? "allreduce" : "broadcast") &&
                      e.state >= 1 && e.state <= 3 &&
                      (e.state >= 2 ? e.started_ns >= e.enqueued_ns : e.started_ns == 0) &&
                      (e.state >= 3 ? e.completed_ns >= e.started_ns : e.completed_ns == 0);
      if (!ok) ++bad;
    }
  }
  writer.join();
  CHECK(bad == 0);
  std::filesystem::remove(path);
}

TEST_CASE(
    "Heartbeat creates DDPRUN_HEARTBEAT_FILE, moves its mtime to now, and after Finishing creates "
    "it again") {
  // Heartbeat() reads the variable once per process: this is its only test.
  const std::string path = TempPath("heartbeat");
  std::filesystem::remove(path);
  REQUIRE(setenv("DDPRUN_HEARTBEAT_FILE", path.c_str(), 1) == 0);
  Heartbeat();
  REQUIRE(std::filesystem::exists(path));
  const timespec old[2] = {{1000, 0}, {1000, 0}};
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), old, 0) == 0);
  Heartbeat();
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec > 1000);
  // Finishing removes it; a beat after it creates it again, and later beats move that one.
  Finishing();
  CHECK_FALSE(std::filesystem::exists(path));
  Heartbeat();
  REQUIRE(std::filesystem::exists(path));
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), old, 0) == 0);
  Heartbeat();
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec > 1000);
  unsetenv("DDPRUN_HEARTBEAT_FILE");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ddprun::ddp
