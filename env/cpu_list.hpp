// A set of CPU numbers and its sysfs/taskset text form ("0-3,8-11"), the form
// every CPU set is read from sysfs in and shown to users in.
// Pure functions; thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::env {

// CPU numbers, ascending, without duplicates.
using CpuList = std::vector<int>;

// "0-3,8,10-11" (and a trailing newline, as sysfs writes it) as a CpuList;
// "" is the empty list. nullopt for any other shape: a reversed range, a
// negative or non-decimal number, an empty item.
std::optional<CpuList> ParseCpuList(std::string_view text);

// The shortest text ParseCpuList reads back as `cpus`: {0,1,2,3,8} -> "0-3,8";
// {} -> "".
std::string FormatCpuList(const CpuList& cpus);

// The CPUs in both lists.
CpuList Intersect(const CpuList& a, const CpuList& b);

}  // namespace ddprun::env
