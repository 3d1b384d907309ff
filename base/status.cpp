#include "base/status.hpp"

#include <cerrno>
#include <cstring>

namespace ddprun {

Status ErrnoStatus(std::string_view what, int err) {
  StatusCode code = StatusCode::kInternal;
  if (err == ENOENT) code = StatusCode::kNotFound;
  if (err == EACCES || err == EPERM) code = StatusCode::kPermissionDenied;
  if (err == EAGAIN || err == EADDRINUSE || err == EMFILE || err == ENFILE) {
    code = StatusCode::kUnavailable;
  }
  return Status(code, std::string(what) + ": " + std::strerror(err));
}

}  // namespace ddprun

#include <poll.h>
#include <unistd.h>

#include "base/unique_fd.hpp"

namespace ddprun {

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace ddprun
