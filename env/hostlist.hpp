// Slurm hostlist expressions ("n[01-04,07]", "rack[1-2]-n[01-02],login1")
// expanded to host names, in the order `scontrol show hostnames` prints them.
//
// Grammar, as Slurm's src/common/hostlist.c reads it (one dimension):
//   list   = expr { sep expr }          sep is ',' or whitespace outside brackets;
//                                       empty expressions are skipped
//   expr   = text { '[' ranges ']' text }
//   ranges = range { ',' range }
//   range  = digits [ '-' digits ]      lo <= hi
// Each number keeps the width of the range's lower bound: "[01-10]" gives 01..10,
// "[1-10]" gives 1..10, "[08-100]" gives 08..99 then 100. Several bracket groups
// in one expression expand as a cartesian product, the first group slowest.
// Duplicates are kept, as Slurm keeps them.
//
// Thread safety: pure functions. Failure: kInvalidArgument naming the
// expression and what is wrong; never a partial list.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.hpp"

namespace ddprun::env {

// At most this many hosts in one expansion (Slurm's MAX_RANGE bounds a single
// range to 64 Ki hosts; we bound the whole list), so that a hostile expression
// ("n[0-999999999]") cannot exhaust memory.
inline constexpr size_t kMaxHostlistHosts = 65536;
// At most this many characters in one expanded host name (a DNS name is at
// most 253). Together with kMaxHostlistHosts this bounds the output to 16 MiB.
inline constexpr size_t kMaxHostNameLength = 255;

// The host names `expr` stands for, in Slurm's order. An empty or all-separator
// `expr` gives an empty list.
StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view expr);

// The first host `expr` stands for (the one a launcher uses as the rendezvous
// host). The whole expression is checked: kInvalidArgument when it is invalid
// or names no host.
StatusOr<std::string> FirstHost(std::string_view expr);

}  // namespace ddprun::env
