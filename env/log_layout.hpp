// torchrun's log directory layout:
//   <base>/<run_id>_<random>/attempt_<N>/<local_rank>/{stdout.log,stderr.log,error.json}
// where <base> is --log_dir, or a fresh /tmp/ddprun_XXXXXX when none is given.
// ddprun adds, per worker, <local_rank>/{heartbeat,trace.bin} and, per
// attempt, attempt_<N>/dumps/ (docs/flight-recorder.md).
// --log_dir=/dev/null turns every file off (error file paths become "").
//
// Not thread-safe; one per launcher.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "base/status.hpp"

namespace ddprun::env {

// TMPDIR's value `tmpdir`, or /tmp when empty; a relative one made absolute
// from the current directory, as Python's tempfile does: the workers are
// given paths under it (TORCHELASTIC_ERROR_FILE, the heartbeat and timer
// files) and may change directory.
// One that does not exist or cannot be written falls back as Python's
// tempfile.gettempdir does (/tmp, /var/tmp, /usr/tmp).
std::string TempDirectory(const std::string& tmpdir);

// What is wrong with TMPDIR's value `tmpdir` and where ddprun's temporary
// files go instead; nullopt when it is unset or usable.
std::optional<std::string> TempDirectoryProblem(const std::string& tmpdir);

class LogLayout {
 public:
  // Creates the run directory, <run_id>[_<node>]_<random>. `log_dir` empty
  // means a temporary base; `node` (e.g. "node1-n07" under Slurm) tells the
  // run directories of nodes that share one --log_dir apart.
  static StatusOr<LogLayout> Create(const std::string& log_dir, const std::string& run_id,
                                    const std::string& node = "");

  bool disabled() const { return disabled_; }
  bool base_is_temporary() const { return temporary_; }
  const std::string& base_dir() const { return base_; }
  const std::string& run_dir() const { return run_; }

  // Creates attempt_<attempt>/ for rendezvous round `round` with one folder
  // per local rank, each holding an empty heartbeat file (its mtime is the
  // launch time), and the dumps/ folder. A round that keeps the restart
  // count (nodes joined or left) finds the attempt's folder of an earlier
  // round: that one is kept as attempt_<attempt>.round_<its round> (torchrun
  // deletes it; its logs may be the only copy of that output). Where that
  // rename fails, the earlier round's folder is replaced and *lost says why.
  Status PrepareAttempt(int attempt, int round, int local_world_size, std::string* lost = nullptr);

  std::string AttemptDir(int attempt) const;
  // Paths of one worker's files; "/dev/null" (or "" for the error file) when disabled.
  std::string StdoutPath(int attempt, int local_rank) const;
  std::string StderrPath(int attempt, int local_rank) const;
  std::string ErrorFile(int attempt, int local_rank) const;
  std::string FilteredPath(int attempt, const std::string& stream) const;
  // ddprun's own worker files; "" when disabled.
  std::string HeartbeatPath(int attempt, int local_rank) const;
  std::string TracePath(int attempt, int local_rank) const;
  std::string DumpDir(int attempt) const;

 private:
  std::string RankFile(int attempt, int local_rank, const std::string& name) const;

  bool disabled_ = false;
  bool temporary_ = false;
  std::string base_;
  std::string run_;
  std::map<int, int> round_of_attempt_;  // the round each attempt's folder was made for
};

}  // namespace ddprun::env
