// Picking a free TCP port for MASTER_PORT when no agent store hosts one.
//
// The port is free when checked and may be taken before the worker binds it
// (the race torchrun 1.13 also has); the agent store removes it later.
#pragma once

#include <string>

#include "base/status.hpp"

namespace ddprun::rendezvous {

// Binds `host`:0 (any local address if `host` is empty), reads the port the
// kernel chose, and closes the socket.
StatusOr<int> FindFreePort(const std::string& host);

}  // namespace ddprun::rendezvous
