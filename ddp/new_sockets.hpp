// The sockets that one step of set-up opened, to shut down later. Gloo (the
// version Debian ships) keeps its connections out of reach: closing them
// through its API does not wake a collective waiting on them, while a
// socket shut down does (its reader fails every pending operation) and
// tells the peer at once. Each socket is known by descriptor and inode, so a
// descriptor closed and reused meanwhile is left alone.
#pragma once

#include <sys/types.h>

#include <set>
#include <utility>
#include <vector>

namespace ddprun::ddp {

class NewSockets {
 public:
  // Notes the sockets open now; call before the step.
  NewSockets();
  // Keeps the sockets opened since the constructor (by any thread: call it
  // where no other thread opens sockets meanwhile).
  void Collect();
  // shutdown(SHUT_RDWR) of each kept socket that is still the same and
  // connected; returns how many.
  int ShutDown() const;
  size_t size() const { return kept_.size(); }

 private:
  std::set<ino_t> before_;
  std::vector<std::pair<int, ino_t>> kept_;  // descriptor, inode
};

}  // namespace ddprun::ddp
