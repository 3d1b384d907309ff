// Running a short helper command (nvidia-smi, scontrol) for what it prints.
// Blocking: for start-up checks and `ddprun doctor`, never the supervisor loop.
#pragma once

#include <string>
#include <vector>

namespace ddprun {

// Whether `program` is an executable in a PATH directory.
bool OnPath(const std::string& program);

// The non-empty lines `command` (run by /bin/sh) prints on stdout; none when it
// cannot run or exits non-zero. Bound it with timeout(1) where it may hang.
std::vector<std::string> CommandLines(const std::string& command);

}  // namespace ddprun
