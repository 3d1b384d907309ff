// Each worker's progress as the supervisor sees it: the modification time of
// its heartbeat file (DDPRUN_HEARTBEAT_FILE, created by ddprun: a newer one is
// a beat), progress noted otherwise (an output line, a PyTorch collective),
// and the file's removal (the worker is finishing: only its exit is due) or
// creation again (running again). A file gone with its directory was not
// removed by the worker (a cleaner of /tmp took the run's directory): both
// are made again, and the worker runs on (attack 102: it was taken for
// finishing, then killed as hung at exit). A file that cannot be written (the
// directory made read-only) stops the worker's beats: it is not found hung for
// that silence, which is said once, until the file can be written again.
// Looked at only when the supervisor asks, so
// a beat costs the worker one touch and ddprun nothing; hang_check.hpp turns
// what it saw into a verdict.
//
// Not thread-safe: use from the supervisor's loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "supervisor/group_state.hpp"
#include "supervisor/hang_check.hpp"

namespace ddprun::supervisor {

class HeartbeatWatch {
 public:
  // Forgets every worker (a new group).
  void Clear() { workers_.clear(); }
  // The next worker, started at `now`; `file` is "" when it has none (or
  // could not be started). `file_time` is FileTime(file) read before the
  // worker started: one quick to remove its file may have done so already.
  // Indices follow the group's workers. `output_is_progress`: its output lines
  // count as beats (--hang_detect=output), so a file it cannot write stops none.
  // `finished_file`: where the PyTorch hook says the worker's main module
  // finished (WorkerSpec::finished_file), "" for none.
  void Add(const std::string& file, SteadyTime now, int64_t file_time,
           bool output_is_progress = false, const std::string& finished_file = "");
  // A file's modification time in ns since the epoch; 0 when it is gone (or "").
  static int64_t FileTime(const std::string& path);
  // Worker `index` made progress at `now` (a line of output, a collective);
  // a finishing worker's is no progress: it has its --exit_timeout to exit.
  void NoteProgress(size_t index, SteadyTime now);
  // Reads every heartbeat file; `workers` names them in the log. `wall_now_ns`
  // (the system clock) places a file time in steady time by its age.
  void Look(SteadyTime now, int64_t wall_now_ns, const std::vector<WorkerRecord>& workers);
  // Time that does not count (base/pause_clock.hpp): every worker's last progress
  // moves `by` later, to `now` at most. Look() first, so that beats from before
  // the pause are placed before it is discounted.
  void Postpone(SteadyTime::duration by, SteadyTime now);
  // hang_check.hpp's view: one Beat per worker of `workers`.
  std::vector<Beat> Beats(const std::vector<WorkerRecord>& workers) const;
  // How long before `wall_now_ns` worker `index` removed its heartbeat file
  // (finishing), read afresh for one that ended before a look saw it, and
  // dated by its directory's change where that is later than its last beat;
  // nullopt when its program cannot be taken for finished: the file is there
  // (or there was none, or it went with its directory), it was untouched for
  // a day (a cleaner of /tmp that removes old files took it), or, with
  // a finished file (the PyTorch hook's), that file is not there (it only
  // destroyed its process group: more may come). Asked as the worker's exit
  // is read: a crash then came in its teardown.
  std::optional<SteadyTime::duration> Finished(size_t index, SteadyTime now,
                                               int64_t wall_now_ns) const;

 private:
  struct Progress {
    SteadyTime last;          // last beat, or the start, or when seen finishing, less pauses ...
    SteadyTime seen;          // ... and when that was
    bool beaten = false;      // beat at least once
    int64_t mtime_ns = 0;     // heartbeat file mtime last seen (0: none yet)
    bool finishing = false;   // removed its heartbeat file: only its exit is due
    std::string cannot_beat;  // why the file cannot be written, "" when it can
    bool output_is_progress = false;
    bool touched = false;  // a look saw the worker's own touch of the file
    std::string file;
    std::string finished_file;  // the PyTorch hook's word that the main module finished
  };
  // Makes the heartbeat file of `p`, gone with its directory, again, with
  // the time of its last beat; says so once per directory. One it cannot
  // make again (a file in the directory's place) is as one that cannot be
  // written.
  void Restore(Progress& p, int rank, SteadyTime now);
  // Notes whether `p`'s file can be written (it exists), saying so when that changes.
  void WatchWritable(Progress& p, int rank, SteadyTime now);

  std::vector<Progress> workers_;
  std::set<std::string> restored_;  // directories said to be made again
};

}  // namespace ddprun::supervisor
