// Known failure signatures, explained: what a failed worker's error file and
// last output lines say, turned into one "cause" and one "fix" line under the
// failure report's root cause. One table (explain.cpp; its entries in
// explain_entries.hpp); a signature matches on the text the worker printed,
// or on what the launcher saw (a signal it did not send while the OOM kill
// count rose), and its lines name what that names (a module, a rank, a
// limit). No match, no explanation: never a guess.
//
// Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "env/interfaces.hpp"
#include "env/limits.hpp"
#include "env/memory.hpp"
#include "supervisor/failure_report.hpp"

namespace ddprun::supervisor {

// What the launcher knows that the worker's text does not.
struct ExplainContext {
  std::string interpreter;         // the workers' Python, "" when not under Python
  std::string interpreter_source;  // where it came from ("PATH", "PYTHON_EXEC", ...)
  int nproc_per_node = 0;          // 0: unknown
  // CUDA_VISIBLE_DEVICES as the workers got it; nullopt: unset (all GPUs).
  std::optional<std::string> visible_devices;
  int visible_gpus = -1;  // how many GPUs a worker sees; -1: unknown
  // RLIMIT_NPROC and the user's threads, read when the report is written.
  std::optional<env::LimitFacts> limits;
  std::optional<uint64_t> shm_size_bytes;  // statvfs(/dev/shm) total; nullopt: none
  // The run's log directory and the bytes free for a user on its filesystem
  // (statvfs f_bavail); nullopt: unknown.
  std::string log_dir;
  std::optional<uint64_t> log_free_bytes;
  // The failed worker wrote a stream of its own straight into a log file
  // there (--redirects, read by nobody), so its writes met that filesystem.
  bool writes_own_logs = false;
  // What listens on a TCP port of this host ("python3 (pid 12)"), "" when
  // unknown; may be empty (not asked).
  std::function<std::string(int port)> port_holder;
  // This host's network interfaces, and the socket-interface variables as the
  // workers got them ("" when unset).
  std::vector<env::NetInterface> interfaces;
  std::string gloo_socket_ifname;
  std::string nccl_socket_ifname;
  std::string nccl_socket_family;
  // The job is this host's workers only, and every other one was still
  // running when the failed one ended.
  bool peers_running = false;
  // The failed group spanned more than this host (its world size is more than
  // this host's workers).
  bool multi_node = false;
  // The signal the failed worker died of, when ddprun did not send it; 0
  // when it exited, or ddprun stopped it (a hang, an expired file timer).
  int unasked_signal = 0;
  // unasked_signal is the signal a command of the worker, a shell, died of:
  // the worker itself exited 128 + unasked_signal.
  bool signal_via_shell = false;
  // Where the failed worker's core dump went (FailureRecord::core; set by
  // Explain() from the failure): "" when none was dumped.
  std::string core_dump;
  // The failed worker was declared hung (FailureRecord::hung; set by
  // Explain()): it did not end by raising what its output shows.
  bool hung = false;
  // Seconds between the failed worker's removing its heartbeat file and its
  // crash on its way out (FailureRecord::crashed_at_exit_after; set by
  // Explain()); -1 when it did not so crash.
  double crashed_at_exit_after = -1;
  // The failed worker's last output lines, beyond its last traceback
  // (FailureRecord::output_tail; set by Explain()): what its children said.
  std::string output_tail;
  // The OOM kills since the failed worker's group started (env::OomKillsSince)
  // and the memory facts now; nullopt: not read.
  std::optional<env::MemoryFacts> memory;
  // From the DDP core's flight recorders of the failed group: the ranks that
  // never entered the collective the others timed out in
  // (supervisor::NeverEntered); "" when none is known.
  std::string never_entered;
  // From ddprun's PyTorch hook (--hang_detect=torch) as the group failed: which
  // rank did not enter the collective another waited in (NameLaggards'
  // verdict, "rank 1 did not enter gloo:all_reduce #4 (rank 0 waits in it)");
  // "" when none lagged or the hook was off.
  std::string torch_laggards;
  // The first collective two ranks ran differently (supervisor::FirstMismatch):
  // their programs diverged; "" when none.
  std::string diverged;
  // The ranks found stopped as the group began to stop: "rank 0 was stopped
  // by a signal (SIGSTOP)"; "" when none.
  std::string stopped;
  // The ranks of this host's group that had exited 0 (their programs
  // finished) before the failed worker ended, and how long before it the
  // last of them did.
  std::vector<int> finished_ranks;
  double finished_seconds_before = 0;
};

struct Explanation {
  std::string signature;  // the catalogue entry's name, e.g. "module not found"
  std::string cause;
  std::string fix;
};

std::optional<Explanation> Explain(const FailureRecord& failure, const ExplainContext& context);

// What, in a worker's text, says that a connection to a peer broke (Gloo's
// "Connection closed by peer", ECONNRESET, a broken pipe): the words found,
// or nullopt.
std::optional<std::string> LostPeerSign(std::string_view text);

}  // namespace ddprun::supervisor
