// Human-readable quantities for messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun {

// "512 B", "1.5 KiB", "25.0 MiB", "2.0 GiB".
std::string FormatBytes(uint64_t bytes);
// "600", "2.5": seconds to a tenth, without trailing zeros.
std::string FormatSeconds(double seconds);
// "0,2,3"; "" for none.
std::string JoinRanks(const std::vector<int>& ranks);
// "rank 1" or "ranks 0,2,3".
std::string RanksNoun(const std::vector<int>& ranks);

}  // namespace ddprun
