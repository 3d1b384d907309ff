// A worker that holds its job: stopped (SIGSTOP, a debugger's breakpoint) or
// waiting for the console, while its peers wait for it in their collectives.
// The launcher leaves that time out of the hang limits (base/pause_clock.hpp)
// on its own node, and tells the job's other nodes through the rendezvous
// store (rendezvous/pause_board.hpp), whose limits wait too.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.hpp"

namespace ddprun {

struct HeldWorker {
  // 'T' stopped by a signal, 't' by a debugger or tracer, 'C' waiting for the
  // console; 0: no worker holds the job.
  char state = 0;
  int rank = -1;
  int local_rank = -1;
  int64_t pid = 0;
  int node_rank = -1;  // set by the agent that tells it
  std::string host;    // the same

  // A worker of this node (node and host unset).
  static HeldWorker Local(char state, int rank, int local_rank, int64_t pid) {
    HeldWorker w;
    w.state = state;
    w.rank = rank;
    w.local_rank = local_rank;
    w.pid = pid;
    return w;
  }

  bool held() const { return state != 0; }
  bool stopped() const { return state == 'T' || state == 't'; }
  bool operator==(const HeldWorker& o) const {
    return state == o.state && rank == o.rank && local_rank == o.local_rank && pid == o.pid &&
           node_rank == o.node_rank && host == o.host;
  }
  bool operator!=(const HeldWorker& o) const { return !(*this == o); }

  // One line of space-separated fields, the host last (it has no spaces).
  std::string Encode() const;
  static StatusOr<HeldWorker> Decode(const std::string& text);
};

}  // namespace ddprun
