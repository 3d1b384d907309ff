#include "ddp/new_sockets.hpp"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>

namespace ddprun::ddp {
namespace {

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~Pair() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  // A read on the other end sees end of file once this end is shut down.
  bool PeerSeesEnd() const {
    char c = 0;
    return read(fd[1], &c, 1) == 0;
  }
};

TEST_CASE("only the sockets opened between construction and Collect are shut down") {
  Pair before;
  NewSockets sockets;
  Pair during;
  sockets.Collect();
  Pair after;
  CHECK(sockets.size() == 2);  // both ends of `during`
  CHECK(sockets.ShutDown() == 2);
  CHECK(during.PeerSeesEnd());
  char c = 'x';
  CHECK(write(before.fd[0], &c, 1) == 1);  // still open both ways
  CHECK(write(after.fd[0], &c, 1) == 1);
}

TEST_CASE("a descriptor closed and reused by another socket is left alone") {
  NewSockets sockets;
  std::optional<Pair> during(std::in_place);
  sockets.Collect();
  const int a = during->fd[0];
  const int b = during->fd[1];
  during.reset();  // both descriptors free
  Pair reused;     // most likely the same two numbers, another inode
  CHECK((reused.fd[0] == a || reused.fd[0] == b));
  CHECK(sockets.ShutDown() == 0);
  char c = 'x';
  CHECK(write(reused.fd[0], &c, 1) == 1);
}

}  // namespace
}  // namespace ddprun::ddp
