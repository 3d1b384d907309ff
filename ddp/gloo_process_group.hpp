// The CPU process group on Gloo (Debian's libgloo), bootstrapped through the
// agent store: Gloo's full-mesh rendezvous keys live under the attempt's key
// space, and the TCP device binds the local address that routes to
// MASTER_ADDR (so a host name that resolves to 127.0.1.1 does not break
// multi-node jobs), or the interface GLOO_SOCKET_IFNAME names.
#pragma once

#include <memory>

#include "base/status.hpp"
#include "ddp/process_group.hpp"

namespace ddprun::ddp {

StatusOr<std::unique_ptr<ProcessGroup>> CreateGlooProcessGroup(const LaunchEnv& env);

}  // namespace ddprun::ddp
