#include "base/read_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/unique_fd.hpp"

namespace ddprun {

std::string ReadSmallFile(const std::string& path, size_t limit) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
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

}  // namespace ddprun
