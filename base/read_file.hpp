// Reads a small file whole: /proc and /sys entries, cgroup files. Those
// report a size of 0, so the file is read until its end (or `limit` bytes)
// rather than by its size.
#pragma once

#include <cstddef>
#include <string>

namespace ddprun {

// The file's bytes, at most `limit` of them; empty when it cannot be opened
// or read (a process that has just ended, a file that does not exist).
std::string ReadSmallFile(const std::string& path, size_t limit = size_t{16} << 20);

}  // namespace ddprun
