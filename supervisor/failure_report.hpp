// Failure records and torchrun's ChildFailedError report.
//
// The report keeps torchrun's layout ("<name> FAILED", "Failures:",
// "Root Cause (first observed failure):", the same field names) so that
// people and log scrapers recognise it; the root cause is the failure with
// the earliest error-file timestamp, else the first one observed.
#pragma once

#include <string>
#include <vector>

#include "supervisor/supervisor.hpp"

namespace ddprun::supervisor {

// A report field nothing fills (torchrun's word): error_file of a worker that wrote none.
inline constexpr char kNotAvailable[] = "<N/A>";

struct FailureRecord {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  ExitStatus exit;
  long long timestamp = 0;           // seconds since the epoch
  bool timed_by_error_file = false;  // the timestamp is the error file's own
  std::string error_file;            // "<N/A>" when the worker wrote none
  std::string message;               // traceback, error message, or what happened
  bool hung = false;                 // declared hung by the launcher
  bool hung_at_exit = false;  // hung after removing its heartbeat file: its program had finished
  // Seconds between its removing its heartbeat file (its program finished) and
  // its crash (ExitStatus::Crashed) on its way out; -1 when it did not so crash.
  double crashed_at_exit_after = -1;
  bool timer = false;            // its file timer expired (message says which and how long)
  std::string output_tail;       // the worker's last output lines
  bool tail_has_stdout = false;  // of stdout and stderr; else of stderr alone
  bool stderr_seen = false;      // its whole stderr was read: an empty tail means it wrote none
  std::vector<std::string> lost_logs;  // each incomplete log file: which and why
  bool after_stop = false;             // found failing only once the group was stopping
  // An after_stop failure whose error file is older than the failure that
  // stopped the group: it raised first, so it is the root cause (exit code 1,
  // Python's for what it raised, not the stop's signal).
  bool raised_first = false;
  std::string core;  // where its core dump went ("" = none dumped)
};

// Reads a worker's error file (torchrun's JSON, nested or flat form). Returns
// false, leaving `record` alone, when the file is missing or unreadable.
bool ReadErrorFile(const std::string& path, FailureRecord& record);

// JSON text with each \uXXXX escape of an unpaired UTF-16 surrogate replaced
// by \ufffd. Python's json writes them (a file name that is not UTF-8 comes
// as "\udcff") and reads them back; strict parsers refuse the whole text.
std::string WithoutLoneSurrogates(const std::string& json_text);

// What Python's json writes that strict JSON is not, made strict: lone
// surrogates (above), and NaN, Infinity and -Infinity outside strings (its
// json.dump writes a float field so by default) as null.
std::string StrictJson(const std::string& python_json);

// Whether JSON text nests its arrays and objects deeper than kMaxJsonDepth:
// the JSON library copies and prints a value recursively, so a worker's file
// of 100,000 brackets would overflow ddprun's stack. Such a file is not read.
constexpr size_t kMaxJsonDepth = 100;
bool NestsTooDeep(const std::string& json_text);

// The most of a worker's error file ddprun reads (torchrun reads it whole: a
// file of an exception with a huge message is tens of MiB). A larger file is
// named, with its size, and not parsed.
constexpr size_t kErrorFileLimit = size_t{64} << 20;

// A failed group's workers that the stop found already failing on their own
// become failures too (after the root cause), as torchrun lists every rank
// that failed: a worker counted as stopped whose error file exists (it raised)
// or that ended with an exit code of its own (not a signal, not 128+N).
// Nothing changes unless the group failed.
void CountOwnFailures(GroupResult& result, const std::vector<std::string>& error_files);

// Workers whose last lines were not read through a pipe (their stderr went
// straight to a file) get the end of that file: `stderr_logs[i]` is local rank
// i's ("" or /dev/null: none).
void FillTailsFromLogs(GroupResult& result, const std::vector<std::string>& stderr_logs);

// Whether a failure looks like the consequence of a peer going away (its
// connection broke, or SIGPIPE) rather than a cause of its own.
bool DiedOfPeer(const FailureRecord& f);

// One record per failed worker of `result`, root cause first.
// `error_files[i]` is the error file path of local rank i. A worker that
// wrote none has its last output line shown, and, when the workers run under
// Python (`python`), the advice to decorate its entry point with @record.
std::vector<FailureRecord> CollectFailures(const GroupResult& result,
                                           const std::vector<std::string>& error_files,
                                           bool python);

// The report text, starting and ending with a border line.
// `cause` and `fix`, when given, follow the root cause (supervisor/explain.hpp).
std::string FormatReport(const std::string& name, const std::string& host,
                         const std::vector<FailureRecord>& failures, const std::string& cause = "",
                         const std::string& fix = "");

// Copies the root cause into the launcher's own error file (what torchrun's
// @record does for a scheduler that set TORCHELASTIC_ERROR_FILE on it).
Status DumpRootCause(const FailureRecord& root, const std::string& path);

}  // namespace ddprun::supervisor
