// Small files read and written whole: /proc and /sys entries, cgroup files,
// the error file and reports a user points ddprun at. Neither ever waits for
// a partner: a named pipe that nobody writes reads as empty, and one that
// nobody reads is an error, not a wait that no signal ends.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.hpp"
#include "base/unique_fd.hpp"

namespace ddprun {

// The file's bytes, at most `limit` of them; empty when it cannot be opened
// or read (a process that has just ended, a file that does not exist). Read
// until its end, not by its size: /proc files report a size of 0.
std::string ReadSmallFile(const std::string& path, size_t limit = size_t{16} << 20);

// Opens `path` for writing with open(2) `flags` (O_WRONLY and O_CLOEXEC
// added); the error names the file and says what to do.
StatusOr<UniqueFd> OpenForWriting(const std::string& path, int flags, mode_t mode = 0644);

// Writes `data` to `path`, created or emptied first.
Status WriteSmallFile(const std::string& path, std::string_view data);

}  // namespace ddprun
