// PyTorch's side of a hang (--hang_detect=torch): what ddprun's hook
// (python/ddprun_torch/sitecustomize.py) recorded of each rank's last
// collective in <dir>/progress_<rank>, the rank(s) that did not enter the
// latest one, and PyTorch's own flight recorder dumped and analysed.
//
// CollectTorchSide blocks for at most about `wait` plus twice
// `tool_timeout`; it kills nothing. Thread-compatible.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::supervisor {

// One rank's last collective in one process group: a line of its progress
// file, "<seq> <op> <entered|retired|raised> <group> <ranks|*|?> <desc>" (the hook
// writes the newest last; lines of three fields are the default group's).
// Or a point-to-point operation the rank waits in, which Gloo's flight
// recorder does not record: "p2p <send|recv> <peer|*|?> <group> <ranks> <desc>".
struct TorchProgress {
  static constexpr int kAnyPeer = -1;      // a recv from any rank
  static constexpr int kUnknownPeer = -2;  // the hook could not tell
  int rank = 0;
  long seq = -1;  // -1: no progress file (or a p2p line)
  bool p2p = false;
  int peer = kUnknownPeer;   // p2p: the other side's global rank
  std::string op;            // p2p: "send" or "recv"
  bool entered = false;      // entered #seq and not seen finishing it
  bool raised = false;       // a monitored_barrier that raised: the ranks' counts of the
                             // group's barriers no longer match, they are not compared
  std::string group = "0";   // the process group's name (PyTorch's group_name)
  std::string desc;          // its group_desc ("default_pg", "undefined", the user's)
  bool everyone = true;      // the default group: every rank of the job
  std::vector<int> members;  // otherwise its global ranks; none known: those that recorded it
};

struct TorchSide {
  std::string text;            // for the summary; ends with a newline
  std::string verdict;         // one line, to print the moment the hang is found
  std::string state;           // the same without what it means for a hang (a dump on request)
  std::vector<int> laggards;   // ranks that did not enter the latest collective
  bool none_recorded = false;  // no rank's hook recorded a collective (or could not write it)
  // A deadlock: the ranks that wait for each other. None alone is behind, but
  // the root cause is among them, not among the ranks that merely wait with them.
  std::vector<int> deadlocked;
  // Every rank read waits inside the same collective: none here is behind,
  // so a rank elsewhere (another node) that never entered it may be.
  bool all_waiting = false;
};

// Where the hook found rank `rank`'s Python (<dir>/python_<rank>): its pid
// and interpreter; nullopt before the rank made a process group.
struct TorchPython {
  pid_t pid = 0;
  std::string executable;
};
std::optional<TorchPython> ReadTorchPython(const std::string& dir, int rank);

// Parses <dir>/progress_<rank> for each rank: its lines in file order, or one
// with seq -1 for a rank without any.
std::vector<TorchProgress> ReadTorchProgress(const std::string& dir, const std::vector<int>& ranks);

// Names the ranks that did not enter the latest collective of a process group
// another member entered, and are not themselves waiting for someone in a
// collective (a rank blocked in one group falls behind in the others: it is
// not the cause); ranks that wait for each other are a deadlock. Ranks that
// called different collectives at one number of a group are a mismatch. When
// none lags, the verdict says whether every rank waits inside a collective
// (the collective itself, or a rank this agent cannot see) or all finished
// their last one (the hang is outside collectives). A rank with no record
// is behind in the collectives others wait in. A group all of whose members
// are in `beating` (still making progress) makes no one behind: files read a
// moment apart show them at different numbers. Defined in torch_verdict.cpp.
TorchSide NameLaggards(const std::vector<TorchProgress>& progress,
                       const std::vector<int>& beating = {});

// Whether the hook wrote rank `rank`'s progress file in `dir`.
bool ProgressRecorded(const std::string& dir, int rank);

struct TorchQuery {
  std::string dir;  // the hook's directory (DDPRUN_TORCH_DIR)
  std::string out;  // where this dump's files go ("" or `dir`: they stay in `dir`)
  std::vector<int> ranks;
  std::string python;                         // the workers' interpreter; "" runs no analysis
  std::string nccl_ras_addr;                  // the job's NCCL_RAS_ADDR; "" asks no RAS
  std::chrono::milliseconds wait{0};          // for the flight-recorder files
  std::chrono::milliseconds tool_timeout{0};  // fr_trace, and the RAS query
  std::vector<int> beating;                   // ranks still making progress (NameLaggards)
};

// NameLaggards, then asks every rank for its flight recorder (PyTorch's dump
// pipe <dir>/pipe_<rank>.pipe where the backend made one (NCCL), else the
// hook through <dir>/dump_request, a new token each time), waits up to `wait`
// for <dir>/nccl_trace_rank_<rank> (an earlier dump's removed first), moves
// them to `out`, says of each rank whether its dump came, asks NCCL's RAS for
// the job-wide view (saved as <out>/nccl_ras.json or .txt), and runs `python
// -m torch.distributed.flight_recorder.fr_trace` on the dumps that came.
TorchSide CollectTorchSide(const TorchQuery& query);

}  // namespace ddprun::supervisor
