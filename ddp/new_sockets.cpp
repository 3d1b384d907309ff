#include "ddp/new_sockets.hpp"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace ddprun::ddp {
namespace {

// Every open socket of this process: descriptor and inode.
std::vector<std::pair<int, ino_t>> OpenSockets() {
  std::vector<std::pair<int, ino_t>> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) == 0 && S_ISSOCK(st.st_mode)) {
      out.emplace_back(static_cast<int>(fd), st.st_ino);
    }
  }
  closedir(dir);
  return out;
}

}  // namespace

NewSockets::NewSockets() {
  for (const auto& [fd, inode] : OpenSockets()) before_.insert(inode);
}

void NewSockets::Collect() {
  kept_.clear();
  for (const auto& s : OpenSockets()) {
    if (before_.count(s.second) == 0) kept_.push_back(s);
  }
}

int NewSockets::ShutDown() const {
  int done = 0;
  for (const auto& [fd, inode] : kept_) {
    struct stat st {};
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != inode) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;  // a listener
    if (shutdown(fd, SHUT_RDWR) == 0) ++done;
  }
  return done;
}

}  // namespace ddprun::ddp
