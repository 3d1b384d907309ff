// Human-readable quantities for messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// "512 B", "1.5 KiB", "25.0 MiB", "2.0 GiB".
std::string FormatBytes(uint64_t bytes);
// "600", "2.5": seconds to a tenth, without trailing zeros.
std::string FormatSeconds(double seconds);
// `text` as a terminal can show it, whatever a program wrote: valid UTF-8
// kept, control characters (C0, DEL, C1; a tab kept) and bytes that are no
// UTF-8 written as \xNN; at most `max_bytes` of `text`, cut at a character's
// start, with "..." after a cut.
std::string Printable(std::string_view text, size_t max_bytes);
// "0,2,3"; "" for none.
std::string JoinRanks(const std::vector<int>& ranks);
// "rank 1" or "ranks 0,2,3".
std::string RanksNoun(const std::vector<int>& ranks);

}  // namespace ddprun
