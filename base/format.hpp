// Human-readable sizes for messages: "512 B", "1.5 KiB", "25.0 MiB", "2.0 GiB".
#pragma once

#include <cstdint>
#include <string>

namespace ddprun {

std::string FormatBytes(uint64_t bytes);

}  // namespace ddprun
