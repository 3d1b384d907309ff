// PyTorch's side of a hang (--hang_detect=torch): what ddprun's hook
// (python/ddprun_torch/sitecustomize.py) recorded of each rank's last
// collective in <dir>/progress_<rank>, the rank(s) that did not enter the
// latest one, and PyTorch's own flight recorder dumped and analysed.
//
// CollectTorchSide blocks for at most about `wait` plus `tool_timeout`; it
// kills nothing. Thread-compatible.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ddprun::supervisor {

// One rank's "<seq> <op> <entered|retired>".
struct TorchProgress {
  int rank = 0;
  long seq = -1;  // -1: no progress file
  std::string op;
  bool entered = false;  // entered #seq and not seen finishing it
};

struct TorchSide {
  std::string text;           // for the summary; ends with a newline
  std::vector<int> laggards;  // ranks that did not enter the latest collective
};

// Parses <dir>/progress_<rank> for each rank.
std::vector<TorchProgress> ReadTorchProgress(const std::string& dir, const std::vector<int>& ranks);

// Names the ranks that did not enter the latest collective any rank entered.
TorchSide NameLaggards(const std::vector<TorchProgress>& progress);

// NameLaggards, then asks every rank for its flight recorder (PyTorch's dump
// pipe <dir>/pipe_<rank>.pipe where the backend made one (NCCL), else the
// hook through <dir>/dump_request), waits up to `wait` for
// <dir>/nccl_trace_rank_<rank>, and runs `python -m
// torch.distributed.flight_recorder.fr_trace` on them.
TorchSide CollectTorchSide(const std::string& dir, const std::vector<int>& ranks,
                           const std::string& python, std::chrono::milliseconds wait,
                           std::chrono::milliseconds tool_timeout);

}  // namespace ddprun::supervisor
