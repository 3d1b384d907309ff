#include "supervisor/console.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace ddprun::supervisor {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// A console nobody reads yet: a 4 KiB pipe behind an 8 KiB queue. Its
// write end gets a number at or above `number`, which no other test uses
// (writers are kept by number, for the process).
struct StalledConsole {
  explicit StalledConsole(int number) {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    read_fd = fds[0];
    write_fd = fcntl(fds[1], F_DUPFD_CLOEXEC, number);
    close(fds[1]);
    REQUIRE(write_fd >= number);
    fcntl(write_fd, F_SETPIPE_SZ, 4096);
    w = &ConsoleWriter::For(write_fd);
    w->set_capacity(8192);
  }
  ~StalledConsole() {
    close(read_fd);
    close(write_fd);
  }
  StalledConsole(const StalledConsole&) = delete;
  StalledConsole& operator=(const StalledConsole&) = delete;

  // Blocks the writer on a full pipe (a line longer than it): from then on
  // nothing drains until the test reads, whatever the writer thread's pace.
  // Returns that line.
  std::string BlockWriter() const {
    std::string line = std::string(5000, 'b') + "\n";
    REQUIRE(w->WriteOrHold(line));
    int in_pipe = 0;
    for (int i = 0; i < 500 && (ioctl(read_fd, FIONREAD, &in_pipe) != 0 || in_pipe < 4096); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(in_pipe >= 4096);
    return line;
  }

  // Reads until everything queued was written.
  std::string ReadAllQueued() const {
    fcntl(read_fd, F_SETFL, O_NONBLOCK);
    std::string got;
    for (int i = 0; i < 500 && !w->Flush(std::chrono::milliseconds(10)); ++i)
      got += ReadAll(read_fd);
    got += ReadAll(read_fd);
    REQUIRE(w->Flush(std::chrono::milliseconds(1000)));
    return got + ReadAll(read_fd);
  }

  int read_fd = -1;
  int write_fd = -1;
  ConsoleWriter* w = nullptr;
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

TEST_CASE("a console that does not read drops lines, counts them, and says so when it reads") {
  StalledConsole c(600);
  ConsoleWriter& w = *c.w;
  const std::string line(99, 'x');
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i) w.Write(line + "\n", "/logs/0/stdout.log");  // 200 KB
  // Write() returned at once although nobody read: the lines beyond the bound were dropped.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  const uint64_t dropped = w.dropped_lines();
  CHECK(dropped > 1000);
  CHECK(dropped < 2000);
  const std::string got = c.ReadAllQueued();
  // One notice per stretch of drops (the writer may free room in between), adding up to all.
  // While the pipe still took lines (the writer went less than a second without writing) a
  // notice says the console is slower than the workers; then that it does not read.
  const std::string tail = " lines not shown: console ";
  uint64_t told = 0;
  for (size_t p = 0; (p = got.find("[ddprun: ", p)) != std::string::npos; ++p) {
    const size_t end = got.find(tail, p);
    REQUIRE(end != std::string::npos);
    told += std::stoull(got.substr(p + 9, end - p - 9));
    const std::string why = got.substr(end + tail.size(), got.find(']', end) - end - tail.size());
    CHECK((why == "not reading; see /logs/0/stdout.log" ||
           why == "slower than the workers; see /logs/0/stdout.log"));
  }
  CHECK(told == dropped);
  CHECK(Count(got, line) + dropped == 2000);
}

TEST_CASE("a notice for lines of several log files names the directory that holds them") {
  StalledConsole c(620);
  c.BlockWriter();  // one stretch of drops, whatever the writer's pace
  const std::string line(99, 'z');
  for (int i = 0; i < 400; ++i) {
    c.w->Write(line + "\n", "/logs/run/attempt_0/" + std::to_string(i % 2) + "/stdout.log");
  }
  const std::string got = c.ReadAllQueued();
  CHECK(Count(got, "console not reading; see the log files under /logs/run/attempt_0]\n") > 0);
  CHECK(Count(got, "/stdout.log]") == 0);  // not one rank's file for both
}

TEST_CASE("lines kept nowhere else are held, never dropped, and the caller is told of room") {
  StalledConsole c(640);
  ConsoleWriter& w = *c.w;
  std::atomic<int> rooms{0};
  w.SetRoomNotifier([&rooms] { rooms.fetch_add(1); });
  std::string sent;
  int lines = 0;
  auto next = [&] {
    std::string line = "line " + std::to_string(lines++) + " " + std::string(90, 'y') + "\n";
    sent += line;
    return w.WriteOrHold(line);
  };
  // The writer blocked first: the queue's bound cannot move under the test (the writer
  // thread had lagged under ASan on a loaded host).
  sent = c.BlockWriter();
  // Nobody reads: the queue fills and WriteOrHold says so.
  while (next()) REQUIRE(lines < 1000);  // the queue (8 KiB, the blocked line's 5 KiB in it)
  CHECK(lines > 20);
  CHECK(rooms.load() == 0);
  // A caller that ignores it still loses nothing (a drain queues what the pipe held).
  for (int i = 0; i < 10; ++i) CHECK_FALSE(next());
  CHECK(c.ReadAllQueued() == sent);
  CHECK(w.dropped_lines() == 0);
  CHECK(rooms.load() == 1);  // once, when half the bound was free
  w.SetRoomNotifier(nullptr);
}

TEST_CASE("lines a log file keeps never hold their caller on a pipe; what no log keeps is told") {
  StalledConsole c(740);
  const std::string line(99, 'x');
  bool held = false;
  for (int i = 0; i < 500; ++i) held |= !c.w->Write(line + "\n", "/logs/0/stdout.log");
  CHECK_FALSE(held);  // dropped and counted instead
  CHECK(c.w->dropped_lines() > 0);
  CHECK_FALSE(c.w->holds_unkept());  // at exit, given up: the log file has them
  c.w->WriteOrHold(line + "\n");
  CHECK(c.w->holds_unkept());  // at exit, waited for
  c.ReadAllQueued();
  CHECK_FALSE(c.w->holds_unkept());
}

TEST_CASE("a console that is a regular file drops nothing: its producers wait at the bound") {
  char path[] = "/tmp/ddprun_console_fileXXXXXX";
  const int tmp = mkstemp(path);
  REQUIRE(tmp >= 0);
  const int fd = fcntl(tmp, F_DUPFD_CLOEXEC, 760);
  close(tmp);
  ConsoleWriter& w = ConsoleWriter::For(fd);
  w.set_capacity(8192);
  const std::string line(99, 'x');
  int held = 0;
  for (int i = 0; i < 2000; ++i) held += w.Write(line + "\n", "/logs/0/stdout.log") ? 0 : 1;
  REQUIRE(w.Flush(std::chrono::milliseconds(5000)));
  CHECK(w.dropped_lines() == 0);
  CHECK(held > 0);  // the caller was told to wait (and here did not): nothing lost all the same
  CHECK(lseek(fd, 0, SEEK_END) == 2000 * 100);
  close(fd);
  unlink(path);
}

TEST_CASE("the launcher's own lines are not crowded out by a queue full of workers' output") {
  StalledConsole c(660);
  ConsoleWriter& w = *c.w;
  const std::string line(99, 'w');
  while (w.WriteOrHold(line + "\n")) {
  }
  w.Write(line + "\n", "/logs/stdout.log");  // a worker's line beyond the bound: dropped
  CHECK(w.dropped_lines() == 1);
  const std::string report = "Root Cause (first observed failure): rank 0 exitcode 7\n";
  for (int i = 0; i < 20; ++i) w.WriteOwnLine(report);  // 1.1 KB, within the launcher's reserve
  CHECK(w.dropped_lines() == 1);
  CHECK(Count(c.ReadAllQueued(), report) == 20);
}

TEST_CASE("a closed console is given up without blocking or failing the caller") {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  close(fds[0]);
  ConsoleWriter& w = ConsoleWriter::For(fds[1]);
  for (int i = 0; i < 100; ++i) w.Write("line\n");
  CHECK(w.Flush(std::chrono::milliseconds(2000)));
  close(fds[1]);
}

TEST_CASE("the launcher's message starts on a line of its own after a worker's unfinished line") {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  // A descriptor number no other test's writer has (writers are kept by number).
  const int fd = fcntl(fds[1], F_DUPFD_CLOEXEC, 700);
  REQUIRE(fd >= 700);
  close(fds[1]);
  ConsoleWriter& w = ConsoleWriter::For(fd);
  w.Write("\r 10%");
  w.WriteOwnLine("[ddprun] restarting\n");
  CHECK(w.own_line_breaks() == 1);  // the worker's stream learns its line was ended
  w.Write("\r 20%");
  w.Write("\n");
  w.WriteOwnLine("[ddprun] done\n");
  CHECK(w.own_line_breaks() == 1);  // ended nothing
  REQUIRE(w.Flush(std::chrono::milliseconds(2000)));
  close(fd);
  CHECK(ReadAll(fds[0]) == "\r 10%\n[ddprun] restarting\n\r 20%\n[ddprun] done\n");
  close(fds[0]);
}

TEST_CASE("stdout and stderr on one file share a writer, and where its line ends") {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  // Two descriptors of one pipe, as `2>&1` or one terminal makes them.
  const int out = fcntl(fds[1], F_DUPFD_CLOEXEC, 710);
  const int err = fcntl(fds[1], F_DUPFD_CLOEXEC, 720);
  REQUIRE(out >= 710);
  REQUIRE(err >= 720);
  close(fds[1]);
  ConsoleWriter& o = ConsoleWriter::For(out);
  ConsoleWriter& e = ConsoleWriter::For(err);
  CHECK(&o == &e);    // one writer per file: one queue keeps the order of both
  o.Write("\r 10%");  // a worker's bar on stdout
  REQUIRE(o.Flush(std::chrono::milliseconds(2000)));
  e.WriteOwnLine("[ddprun] message\n");  // the launcher's log on stderr
  REQUIRE(e.Flush(std::chrono::milliseconds(2000)));
  CHECK(o.own_line_breaks() == 1);  // stdout's stream learns that its line was ended
  o.Write("\r 20%\n");
  REQUIRE(o.Flush(std::chrono::milliseconds(2000)));
  e.WriteOwnLine("[ddprun] done\n");  // after a whole line: nothing to end
  REQUIRE(e.Flush(std::chrono::milliseconds(2000)));
  close(out);
  close(err);
  CHECK(ReadAll(fds[0]) == "\r 10%\n[ddprun] message\n\r 20%\n[ddprun] done\n");
  CHECK(o.own_line_breaks() == 1);
  close(fds[0]);
}

}  // namespace
}  // namespace ddprun::supervisor
