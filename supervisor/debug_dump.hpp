// The debug dump of a node's workers at a hang (issue 5, "What happens at a
// hang" 2-4): for every worker, native stacks of all threads (eu-stack, else
// gdb), Python stacks (py-spy, when installed), its /proc state, and its
// flight recorder; then a summary with the cross-rank analysis
// (supervisor/trace_analysis.hpp). Nothing is stopped or killed: the tools
// attach with ptrace for a moment and detach.
//
// Every tool runs as a child process without a shell, in its own process
// group, with its output captured and a deadline; on the deadline the group is
// SIGKILLed and what it printed so far is kept. Workers are dumped in
// parallel, one thread each, so 8 ranks take about as long as one.
//
// Thread-safety: all functions may be called from any thread; WriteDebugDump
// blocks the caller until every worker's dump is done (at most about three
// tool timeouts). Call it off the event loop, or accept the pause.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "supervisor/trace_analysis.hpp"

namespace ddprun::supervisor {

struct DumpTarget {
  int rank;
  int local_rank;
  pid_t pid;
  std::string trace_file;  // DDPRUN_TRACE_FILE; "" when off
  pid_t python_pid = 0;    // the rank's Python when the worker runs it (a wrapper script); 0: pid
};

// A rank the caller found hung: silent (no beat, no output) since `since`;
// or, at exit, finishing (its heartbeat file removed) since then.
struct HungRank {
  int rank = 0;
  std::chrono::system_clock::time_point since;  // its last beat (or finishing), by the clock
  bool at_exit = false;
  double counted_seconds = -1;  // of the time since, what its limit counted (-1: all of it)
  // When counted_seconds was taken (the hang's finding; the summary comes
  // after the dump's own seconds, which are no pause); epoch: at the summary.
  std::chrono::system_clock::time_point observed{};
};

struct DumpRequest {
  std::string dir;  // created if missing; gets rank_<R>.txt and summary.txt
  std::vector<DumpTarget> targets;
  std::vector<HungRank> hung;
  std::vector<int> beating;           // ranks that still make progress
  std::map<int, std::string> unseen;  // ranks on other nodes -> why they are not here
  std::chrono::milliseconds tool_timeout{5000};
  size_t trace_entries = 20;  // the last N flight recorder entries per rank
  // --hang_detect=torch: the hook's directory (DDPRUN_TORCH_DIR) and the
  // workers' interpreter for PyTorch's analyser; "" when off
  // (supervisor/torch_progress.hpp). Collected before any stack is taken.
  std::string torch_dir;
  std::string python;
  std::string nccl_ras_addr;  // the job's NCCL_RAS_ADDR; "" asks no RAS
  // Polled while the tools run (every 100 ms): true kills them at once and
  // the dump ends with what it has (the launcher was told to stop). None:
  // the tools run to their timeout.
  std::function<bool()> interrupted;
  // "NAME=VALUE" added to the tools' environment (the job's containment
  // mark: a launcher killed mid-dump leaves no tool behind); "" for none.
  std::string tool_env_entry;
};

struct DumpResult {
  std::string summary;          // also in <dir>/summary.txt
  std::vector<int> stragglers;  // from the flight recorders: the ranks to blame
  // No straggler here, and every rank read waits inside one collective (the
  // DDP core's recorders, or PyTorch's side): the cause may be on a rank this
  // dump cannot see.
  bool all_waiting = false;
  // Why the dump's files are not all in the directory (the first failed
  // write, e.g. a full disk), "" when they are: the summary still is whole.
  std::string not_kept;
};

// With --hang_detect=torch: each target's Python as the hook found it
// (ReadTorchPython), where a wrapper script runs it: py-spy reads that
// process, and its interpreter runs the analysis when `python` is empty.
void FindTorchPythons(DumpRequest& request);

// Writes the dump and returns the summary and the stragglers. A directory or
// file that cannot be written is said in not_kept (with its path), and the
// summary is made all the same; a tool that is missing, fails or times out
// is reported inside the dump.
StatusOr<DumpResult> WriteDebugDump(const DumpRequest& request);

// --- The parts, exposed for tests and for the `ddprun dump` request. ---

// The captured output of one tool run.
struct ToolResult {
  std::string output;      // stdout and stderr interleaved, capped at 4 MiB
  int exit_code = -1;      // -1 when it did not exit normally
  bool timed_out = false;  // killed at the deadline
  bool cut_short = false;  // killed early: the dump was interrupted (DumpRequest::interrupted)
  std::string error;       // not started: "eu-stack: not found on PATH", ...
};

// Runs argv (argv[0] looked up on PATH) with stdin from /dev/null and stdout
// and stderr into one pipe, until it exits or `timeout` passes. While
// WriteDebugDump runs, its request's `interrupted` and `tool_env_entry`
// apply (one dump at a time).
ToolResult RunTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// The full path of an executable `name` on $PATH, or "".
std::string FindOnPath(const std::string& name);

// One worker's dump as collected (before formatting).
struct RankDump {
  DumpTarget target;
  std::string native_tool;  // "eu-stack", "gdb", or "" when neither is installed
  ToolResult native;        // all threads' native stacks
  ToolResult python;        // py-spy dump; error says when not installed
  std::string proc_state;   // FormatProcState
  // env::StoppedState of the worker (or its Python) as the dump began: the
  // ranks in a collective with it wait for it; stopped_pid: which one.
  char stopped = 0;
  pid_t stopped_pid = 0;
  std::vector<env::TraceEntry> trace;
  std::string trace_error;  // "" when `trace` was read (kNoFlightRecorder when missing)
};

// Collects one worker's dump (the tools run one after the other: they all
// ptrace the same process).
RankDump CollectRankDump(const DumpTarget& target, std::chrono::milliseconds tool_timeout);

// /proc/<pid>/status State and Threads, /proc/<pid>/wchan, and per thread
// (/proc/<pid>/task/*) its name, state and wchan. Says so when the process is gone.
std::string FormatProcState(pid_t pid);

// The text of rank_<R>.txt.
std::string FormatRankDump(const RankDump& dump, size_t trace_entries,
                           std::chrono::system_clock::time_point now);

// The summary: hung ranks and since when, the ranks still beating, the
// analysis text, and per rank the top of its main thread's native stack.
std::string FormatSummary(const DumpRequest& request, const std::vector<RankDump>& dumps,
                          const TraceAnalysis& analysis, std::chrono::system_clock::time_point now,
                          const std::string& torch_text = "");

}  // namespace ddprun::supervisor
