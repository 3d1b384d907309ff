#include "env/processes.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace ddprun::env {
namespace {

TEST_CASE("a stat line is read past a name holding spaces and parentheses") {
  const auto e = ParseProcStat(
      "4242 (a) b (c) S 17 4242 4200 34816 4242 4194560 1 0 0 0 5 3 0 0 20 0 1 0 987654 "
      "1234 56 18446744073709551615\n");
  REQUIRE(e);
  CHECK(e->pid == 4242);
  CHECK(e->state == 'S');
  CHECK(e->ppid == 17);
  CHECK(e->session == 4200);
  CHECK(e->start_time == 987654);
  CHECK(!ParseProcStat("4242 (truncated"));
  CHECK(!ParseProcStat("4242 (x) S 1 2 3"));  // no start time
  CHECK(!ParseProcStat(""));
}

TEST_CASE("what a thread is blocked in is told from its syscall file") {
  auto call = [](long number, const char* args) {
    return ParseBlockedCall(std::to_string(number) + " " + args +
                            " 0x0 0x0 0x0 0x7ffd0000 0x7f12345678\n");
  };
  using K = BlockedCall::Kind;
  auto writes_to = [](const std::optional<BlockedCall>& c, int fd) {
    return c && c->kind == BlockedCall::kWrite && c->fd == fd;
  };
  CHECK(writes_to(call(SYS_write, "0x1 0x7ffd1234 0x71"), 1));
  CHECK(writes_to(call(SYS_writev, "0x2 0x7ffd1234 0x3"), 2));
  CHECK(writes_to(call(SYS_sendfile, "0x1 0x5 0x0"), 1));  // out_fd first
  CHECK(writes_to(call(SYS_splice, "0x5 0x0 0x2"), 2));    // fd_out third
  CHECK(writes_to(call(SYS_copy_file_range, "0x5 0x0 0x1"), 1));
  CHECK(writes_to(call(SYS_tee, "0x5 0x1 0x1000"), 1));
  const auto wait = call(SYS_wait4, "0xffffffffffffffff 0x7ffd 0x0");
  CHECK((wait && wait->kind == K::kWaitChild));
  for (long input : {static_cast<long>(SYS_read), static_cast<long>(SYS_ppoll),
                     static_cast<long>(SYS_epoll_pwait), static_cast<long>(SYS_recvfrom)}) {
    const auto waits = call(input, "0x3 0x7ffd1234 0x71");
    CHECK((waits && waits->kind == K::kWaitInput));
  }
  CHECK(!call(SYS_futex, "0x7ffd1234 0x80 0x0"));  // another call: a lock, a collective
  CHECK(!ParseBlockedCall("running\n"));
  CHECK(!ParseBlockedCall("-1 0x7ffd0000 0x7f12345678\n"));  // blocked, in no call
  CHECK(!ParseBlockedCall(""));
}

TEST_CASE("a child blocked writing to a full pipe is seen in write, on that descriptor") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    const int out = dup2(fds[1], 7);
    char block[4096] = {};
    for (;;) (void)!write(out, block, sizeof(block));  // fills the pipe, then blocks
  }
  close(fds[1]);
  std::optional<BlockedCall> call;
  for (int i = 0; i < 500 && !(call && call->fd == 7); ++i) {
    usleep(10000);
    call = ReadBlockedCall(child);
  }
  CHECK((call && call->kind == BlockedCall::kWrite && call->fd == 7));
  const std::vector<pid_t> children = ChildrenOf(getpid());
  CHECK(std::find(children.begin(), children.end(), child) != children.end());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(fds[0]);
  CHECK(!ReadBlockedCall(child));  // gone
}

namespace {

// A child that starts a grandchild which stops itself (SIGSTOP), then
// reads a pipe (`how` "read": a relay of its grandchild's output, which holds
// the pipe's write end; "unrelated": a pipe the grandchild closed, hung for
// its own reasons), or sleeps ("sleep": work of its own). Returns {child,
// grandchild}.
std::pair<pid_t, pid_t> StoppedGrandchild(const char* how) {
  int idle[2], told[2];
  REQUIRE(pipe(idle) == 0);
  REQUIRE(pipe(told) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      if (std::string(how) == "unrelated") close(idle[1]);
      raise(SIGSTOP);
      _exit(0);
    }
    (void)!write(told[1], &grandchild, sizeof(grandchild));
    char c = 0;
    if (std::string(how) != "sleep") (void)!read(idle[0], &c, 1);
    for (;;) sleep(100);
  }
  pid_t grandchild = 0;
  REQUIRE(read(told[0], &grandchild, sizeof(grandchild)) == sizeof(grandchild));
  for (int fd : {idle[0], idle[1], told[0], told[1]}) close(fd);
  return {child, grandchild};
}

}  // namespace

TEST_CASE(
    "a stopped process below a worker that waits for its input holds it, not below one that "
    "works or waits for something else") {
  // A relay (reading its child's output) or mp.spawn (polling its children's pipes) was not
  // looked into: its stopped child's time counted toward the hang limits (attack 116).
  for (const char* how : {"read", "unrelated", "sleep"}) {
    CAPTURE(how);
    const auto [child, grandchild] = StoppedGrandchild(how);
    std::pair<pid_t, char> found{0, 0};
    for (int i = 0; i < 300 && found.first == 0; ++i) {
      usleep(10000);
      if (StoppedState(grandchild) == 0) continue;
      found = StoppedInTree(child);
    }
    if (std::string(how) == "read") {
      CHECK(found.first == grandchild);
      CHECK(found.second == 'T');
    } else {
      // A stopped helper beside a read it does not write hid a real hang (attack 118).
      CHECK(StoppedState(grandchild) == 'T');
      CHECK(found.first == 0);
    }
    kill(grandchild, SIGKILL);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
}

TEST_CASE("a thread other than the main one, blocked writing, is seen in write, by its id") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::atomic<pid_t> writer_tid{0};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    writer_tid = static_cast<pid_t>(syscall(SYS_gettid));
    pthread_setname_np(pthread_self(), "log-writer");
    char block[4096] = {};
    while (!stop) (void)!write(fds[1], block, sizeof(block));  // fills the pipe, then blocks
  });
  while (writer_tid == 0) usleep(1000);
  const pid_t tid = writer_tid;
  std::optional<BlockedCall> call;
  for (int i = 0; i < 500 && !(call && call->fd == fds[1]); ++i) {
    usleep(10000);
    call = ReadBlockedCall(getpid(), tid);
  }
  CHECK((call && call->kind == BlockedCall::kWrite && call->fd == fds[1]));
  // The main thread runs this test: in the read of its own syscall file, no write.
  const auto own = ReadBlockedCall(getpid());
  CHECK_FALSE((own && own->kind == BlockedCall::kWrite));
  const std::vector<pid_t> threads = ThreadsOf(getpid(), 1024);
  REQUIRE(!threads.empty());
  CHECK(threads.front() == getpid());
  CHECK(std::find(threads.begin(), threads.end(), tid) != threads.end());
  CHECK(ThreadsOf(getpid(), 1).size() == 1);
  CHECK(ThreadName(getpid(), tid) == "log-writer");
  stop = true;
  char drain[65536];
  while (read(fds[0], drain, sizeof(drain)) == sizeof(drain)) {
  }
  writer.join();
  close(fds[0]);
  close(fds[1]);
}

TEST_CASE("a TCP line is an established connection to a port, with its inode") {
  const char* line =
      "   3: 0100007F:A1B2 0100007F:7149 01 00000000:00000000 00:00000000 00000000     0        0 "
      "424242 1 0000000000000000 20 4 30 10 -1";
  CHECK(ParseTcpLine(line, 0x7149) == 424242ul);
  CHECK(!ParseTcpLine(line, 29500));                                              // another port
  CHECK(!ParseTcpLine(std::string(line).replace(34, 2, "0A"), 0x7149));           // listening
  CHECK(!ParseTcpLine("  sl  local_address rem_address   st tx_queue", 0x7149));  // the header
}

TEST_CASE("this process's connection to a port is found by its socket's inode") {
  const int server = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(server >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(server, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(server, 1) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(server, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const int port = ntohs(a.sin_port);
  const std::set<unsigned long> before = ConnectionsToPort(port);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  const std::set<unsigned long> to_port = ConnectionsToPort(port);
  const std::set<unsigned long> mine = SocketInodes(getpid());
  size_t shared = 0;
  for (unsigned long inode : to_port) shared += mine.count(inode);
  CHECK(before.empty());
  CHECK(shared == 1);  // the client's end (the server's has the port at its local end)
  close(client);
  close(server);
}

TEST_CASE("this process is in the table, as /proc and getppid/getsid say") {
  const auto self = ReadProcEntry(getpid());
  REQUIRE(self);
  CHECK(self->ppid == getppid());
  CHECK(self->session == getsid(0));
  CHECK(self->state == 'R');
  const auto table = ReadProcTable();
  CHECK(std::find(table.begin(), table.end(), *self) != table.end());
}

TEST_CASE("descendants: the whole tree below, parents first, nothing else") {
  // 1 -> 10 -> 11 -> 12; 10 -> 13; 1 -> 20 (another tree); 30 claims to be its own parent.
  std::vector<ProcEntry> table = {{12, 'S', 11}, {20, 'S', 1},  {11, 'S', 10},
                                  {10, 'S', 1},  {13, 'Z', 10}, {30, 'S', 30}};
  std::vector<pid_t> got;
  for (const auto& e : Descendants(table, 10)) got.push_back(e.pid);
  REQUIRE(got.size() == 3);
  CHECK(std::find(got.begin(), got.end(), 20) == got.end());
  CHECK(std::find(got.begin(), got.end(), 11) < std::find(got.begin(), got.end(), 12));
  CHECK(Descendants(table, 12).empty());
  CHECK(Descendants(table, 30).empty());
  CHECK(Descendants(table, 1).size() == 5);
}

}  // namespace
}  // namespace ddprun::env
