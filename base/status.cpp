#include "base/status.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

namespace internal {

namespace {

const char* CodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kPermissionDenied:
      return "permission denied";
    case StatusCode::kUnimplemented:
      return "unimplemented";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kDeadlineExceeded:
      return "deadline exceeded";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace

void StatusOrFailure(const char* what, const Status& status) {
  // A bug in ddprun, not a user error: say which error was ignored, then abort
  // so that the core dump or the sanitizer's stack shows the caller.
  std::fprintf(stderr, "ddprun: internal error: %s: %s: %s\n", what, CodeName(status.code()),
               status.message().c_str());
  std::abort();
}

}  // namespace internal

}  // namespace ddprun

#include <poll.h>
#include <unistd.h>

#include "base/unique_fd.hpp"

namespace ddprun {

bool WriteAll(int fd, const char* data, size_t size, size_t* written) {
  if (written != nullptr) *written = 0;
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      if (written != nullptr) *written += static_cast<size_t>(n);
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
