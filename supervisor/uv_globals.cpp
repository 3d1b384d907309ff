#include "supervisor/uv_globals.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>

namespace ddprun::supervisor {

Status PrepareUvGlobals() {
  static bool prepared = false;
  if (prepared) return Status::Ok();
  // uv_loop_init opens its epoll fd before the once-only init makes its pipe:
  // three fds, and one spare. Free them just before it runs.
  int probe[4];
  if (pipe2(probe, O_CLOEXEC) != 0) return ErrnoStatus("prepare libuv: pipe", errno);
  const bool spare = pipe2(probe + 2, O_CLOEXEC) == 0;
  const int err = errno;
  for (int fd : {probe[0], probe[1]}) close(fd);
  if (!spare) return ErrnoStatus("prepare libuv: pipe", err);
  for (int fd : {probe[2], probe[3]}) close(fd);
  // The loop itself (more fds after the pipe) may still fail here, which is
  // of no concern yet: only the once-only init is wanted.
  uv_loop_t loop{};
  if (uv_loop_init(&loop) == 0) uv_loop_close(&loop);
  prepared = true;
  return Status::Ok();
}

}  // namespace ddprun::supervisor
