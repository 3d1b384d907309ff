// What the launcher asks the supervisor to run: one entry per local worker.
#pragma once

#include <string>
#include <vector>

namespace ddprun::supervisor {

// Where one of a worker's output streams goes. The cheapest route is chosen:
// straight to the launcher's own stream, straight into a file, or /dev/null;
// only prefixing, copying to two places, or filtering makes the launcher read
// the stream through a pipe.
struct StreamSpec {
  bool console = true;                         // shown on the launcher's matching stream
  std::string prefix;                          // put before every console line ("" = shown as is)
  std::string file;                            // also written here ("" = no file)
  std::vector<std::string> duplicate_filters;  // lines containing one of these ...
  std::string filter_file;                     // ... are copied here, prefixed

  bool NeedsPipe() const {
    return !duplicate_filters.empty() || (console && (!prefix.empty() || !file.empty()));
  }
};

struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  std::vector<std::string> argv;  // argv[0]: path of the executable
  std::vector<std::string> envp;  // "NAME=value", the whole environment
  StreamSpec out;
  StreamSpec err;
};

}  // namespace ddprun::supervisor
