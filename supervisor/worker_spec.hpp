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
  bool console = true;          // shown on the launcher's matching stream
  std::string prefix;           // put before every console line ("" = shown as is)
  std::string fallback_prefix;  // the rank's, for output shown only because its file failed
  std::string file;             // also written here ("" = no file)
  std::vector<std::string> duplicate_filters;  // lines containing one of these ...
  std::string filter_file;                     // ... are copied here, prefixed
  bool track_progress = false;                 // every line is a heartbeat (--hang_detect=output)
  bool keep_tail = false;  // its last lines go into the failure report (read through a pipe)

  bool NeedsPipe() const {
    return track_progress || keep_tail || !duplicate_filters.empty() ||
           (console && (!prefix.empty() || !file.empty()));
  }
};

struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  std::vector<std::string> argv;  // argv[0]: path of the executable
  std::vector<std::string> envp;  // "NAME=value", the whole environment
  StreamSpec out;
  StreamSpec err;
  std::string heartbeat_file;  // its mtime is the last beat ("" = none)
  // Where the PyTorch hook says the rank's main module finished (finished_<RANK>
  // in DDPRUN_TORCH_DIR); "" without the hook: a removed heartbeat file says it.
  std::string finished_file;
  std::vector<int> cpus;         // CPUs it is bound to before exec (empty = the launcher's)
  bool stdin_inherited = false;  // reads the launcher's stdin (else /dev/null)
};

// Workers found hung, handed to the launcher before anything is killed.
struct HangReport {
  struct Worker {
    size_t index = 0;  // into GroupResult::workers
    int rank = 0;
    int local_rank = 0;
    int pid = 0;
    double silent_seconds = 0;  // since the last beat, or since the start
    bool ever_beat = false;
    bool finishing = false;  // removed its heartbeat file: silent_seconds count from then
    // Since the last beat (or the start, or finishing) as the clock says, with
    // the pauses that silent_seconds leaves out.
    double quiet_seconds = 0;
  };
  std::vector<Worker> hung;        // empty for a dump on request
  std::vector<Worker> running;     // every worker still running
  std::vector<int> beating_ranks;  // still making progress
};

}  // namespace ddprun::supervisor
