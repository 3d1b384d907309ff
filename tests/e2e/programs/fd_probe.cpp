// Prints the worker's open descriptors and process facts, one per line:
//   fd <n> -> <target>, pgid_is_pid <0|1>, stdin <target>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <string>

int main() {
  DIR* d = opendir("/proc/self/fd");
  int own = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    int fd = std::stoi(e->d_name);
    if (fd == own) continue;
    char target[512] = {};
    std::string link = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    std::printf("fd %d -> %s\n", fd, n > 0 ? target : "?");
  }
  closedir(d);
  std::printf("pgid_is_pid %d\n", getpgrp() == getpid() ? 1 : 0);
  return 0;
}
