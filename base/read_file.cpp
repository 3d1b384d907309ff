#include "base/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ddprun {

std::string ReadSmallFile(const std::string& path, size_t limit) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return {};
  std::string out;
  char buf[4096];
  while (out.size() < limit) {
    ssize_t n = read(fd.get(), buf, std::min(sizeof(buf), limit - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

StatusOr<UniqueFd> OpenForWriting(const std::string& path, int flags, mode_t mode) {
  UniqueFd fd(open(path.c_str(), flags | O_WRONLY | O_NONBLOCK | O_CLOEXEC, mode));
  if (!fd.valid()) {
    const int err = errno;
    struct stat st {};
    if (err == ENXIO && stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      // /dev/stderr or /proc/self/fd/N of a socket (a journal, a supervisor's socketpair).
      return Unavailable(path +
                         " is a socket, which cannot be opened by its path: point it at "
                         "a file or a named pipe");
    }
    if (err == ENXIO) {
      return Unavailable(path +
                         " is a named pipe that nobody reads: start its reader first, "
                         "or point it at a file");
    }
    return Unavailable(path + ": cannot open it for writing: " + std::strerror(err));
  }
  // Writes wait as to any file (a pipe's reader may be slow).
  const int now = fcntl(fd.get(), F_GETFL);
  if (now >= 0) fcntl(fd.get(), F_SETFL, now & ~O_NONBLOCK);
  return fd;
}

Status WriteSmallFile(const std::string& path, std::string_view data) {
  auto fd = OpenForWriting(path, O_CREAT | O_TRUNC);
  if (!fd.ok()) return fd.status();
  if (!WriteAll(fd->get(), data.data(), data.size())) {
    return Unavailable(path + ": write failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace ddprun
