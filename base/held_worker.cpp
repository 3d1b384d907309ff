#include "base/held_worker.hpp"

#include <sstream>

namespace ddprun {

std::string HeldWorker::Encode() const {
  if (!held()) return "-";
  std::ostringstream out;
  out << state << ' ' << rank << ' ' << local_rank << ' ' << pid << ' ' << node_rank << ' '
      << (host.empty() ? "?" : host);
  return out.str();
}

StatusOr<HeldWorker> HeldWorker::Decode(const std::string& text) {
  HeldWorker w;
  if (text == "-") return w;
  std::istringstream in(text);
  std::string state;
  if (!(in >> state >> w.rank >> w.local_rank >> w.pid >> w.node_rank >> w.host) ||
      state.size() != 1 || (state[0] != 'T' && state[0] != 't' && state[0] != 'C')) {
    return InvalidArgument("not a held worker: \"" + text + "\"");
  }
  w.state = state[0];
  if (w.host == "?") w.host.clear();
  return w;
}

}  // namespace ddprun
