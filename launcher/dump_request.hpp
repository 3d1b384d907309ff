// `ddprun dump [PID]`: asks a running ddprun for a debug dump of all its
// workers without stopping the job. The request is the signal
// kDumpSignal (SIGRTMIN+2), which `kill -RTMIN+2 PID` sends just as well.
#pragma once

#include <csignal>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

inline int DumpSignal() { return SIGRTMIN + 2; }

// When `args` (without argv[0]) is a dump request, sends it and returns the
// exit code: 0 sent, 1 no such ddprun, 2 usage. std::nullopt otherwise.
std::optional<int> MaybeRequestDump(const std::vector<std::string>& args);

}  // namespace ddprun::launcher
