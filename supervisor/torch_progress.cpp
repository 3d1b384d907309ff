#include "supervisor/torch_progress.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/unique_fd.hpp"
#include "supervisor/debug_dump.hpp"
#include "supervisor/nccl_ras.hpp"

namespace ddprun::supervisor {
namespace {

constexpr char kFrPrefix[] = "nccl_trace_rank_";
constexpr size_t kAnalysisLines = 30;

std::string Rank(int r) { return std::to_string(r); }

// "rank 1", "ranks 0,2".
std::string Ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + Rank(ranks[i]);
  return out;
}

// PyTorch's heartbeat monitor (NCCL) reads one line from the pipe and dumps.
// No reader (Gloo, or a process gone): open fails with ENXIO, and the hook's
// request file asks instead.
bool WritePipe(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  return fd.get() >= 0 && write(fd.get(), "1\n", 2) == 2;
}

bool AllDumped(const std::string& dir, const std::vector<int>& ranks) {
  return std::all_of(ranks.begin(), ranks.end(), [&](int r) {
    return std::filesystem::exists(dir + "/" + kFrPrefix + Rank(r));
  });
}

std::string LastLines(const std::string& text, size_t n) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("tabulate is not installed") == std::string::npos) lines.push_back(line);
  }
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) {
    out += "  " + lines[i] + "\n";
  }
  return out;
}

// Asks each rank for its flight recorder and waits for the files. The files
// come from other processes: polled every 100 ms until the deadline.
std::string RequestDumps(const std::string& dir, const std::vector<int>& ranks,
                         std::chrono::milliseconds wait) {
  std::ofstream(dir + "/dump_request").put('\n');
  std::string how;
  for (int r : ranks) {
    const bool piped = WritePipe(dir + "/pipe_" + Rank(r) + ".pipe");
    how += "rank " + Rank(r) + ": " +
           (piped ? "dump asked through PyTorch's pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE)"
                  : "no PyTorch dump pipe (Gloo has none in torch 2.x): dumped by ddprun's hook") +
           "\n";
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!AllDumped(dir, ranks) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return how;
}

}  // namespace

std::vector<TorchProgress> ReadTorchProgress(const std::string& dir,
                                             const std::vector<int>& ranks) {
  std::vector<TorchProgress> out;
  for (int r : ranks) {
    TorchProgress p;
    p.rank = r;
    std::ifstream in(dir + "/progress_" + Rank(r));
    std::string state;
    if (in >> p.seq >> p.op >> state) {
      p.entered = state == "entered";
    } else {
      p.seq = -1;
    }
    out.push_back(p);
  }
  return out;
}

TorchSide NameLaggards(const std::vector<TorchProgress>& progress) {
  TorchSide side;
  side.text = "pytorch collectives (ddprun's hook on the flight recorder):\n";
  long latest = -1;
  std::string op;
  for (const TorchProgress& p : progress) {
    if (p.seq > latest) latest = p.seq, op = p.op;
  }
  const std::string newest = op + " #" + std::to_string(latest);
  std::vector<int> waiting, finished, silent;
  for (const TorchProgress& p : progress) {
    if (p.seq < 0) {
      silent.push_back(p.rank);
      side.text += "  rank " + Rank(p.rank) + ": no collective recorded\n";
      continue;
    }
    const std::string last = p.op + " #" + std::to_string(p.seq);
    if (p.seq < latest) {
      side.laggards.push_back(p.rank);
      side.text += "  rank " + Rank(p.rank) + " did not enter " + newest + ": its last is " + last +
                   (p.entered ? " (entered)" : " (finished)") + "\n";
    } else {
      (p.entered ? waiting : finished).push_back(p.rank);
      side.text +=
          "  rank " + Rank(p.rank) + (p.entered ? " waits in " : " finished ") + last + "\n";
    }
  }
  if (latest < 0) {
    side.verdict = "no rank recorded a collective yet: the hang is before the first one";
  } else if (!side.laggards.empty()) {
    side.verdict = Ranks(side.laggards) + " did not enter " + newest;
    if (!waiting.empty()) {
      side.verdict +=
          " (" + Ranks(waiting) + (waiting.size() == 1 ? " waits" : " wait") + " in it)";
    }
  } else if (!waiting.empty() && finished.empty()) {
    side.verdict = "every local rank waits in " + newest +
                   ": the collective itself is stuck, or a rank on another node never entered it";
  } else {
    side.verdict = Ranks(finished) + " finished " + newest +
                   (waiting.empty() ? "" : " and " + Ranks(waiting) + " wait in it") +
                   ": the hang is outside PyTorch's collectives";
  }
  if (!silent.empty() && latest >= 0) side.verdict += "; " + Ranks(silent) + " recorded none";
  return side;
}

TorchSide CollectTorchSide(const TorchQuery& q) {
  TorchSide side = NameLaggards(ReadTorchProgress(q.dir, q.ranks));
  side.text += "pytorch flight recorder (" + q.dir + "):\n";
  side.text += LastLines(RequestDumps(q.dir, q.ranks, q.wait), q.ranks.size());
  if (!q.nccl_ras_addr.empty()) {
    const RasReport ras = QueryNcclRas(q.nccl_ras_addr, q.tool_timeout);
    if (!ras.raw.empty()) {
      std::ofstream(q.dir + (ras.json ? "/nccl_ras.json" : "/nccl_ras.txt")) << ras.raw;
    }
    side.text += "nccl ras (NCCL_RAS_ADDR=" + q.nccl_ras_addr + "):\n" + SummarizeRas(ras);
  }
  if (q.python.empty()) {
    side.text += "  no analysis: the program does not run under Python\n";
    return side;
  }
  const ToolResult r = RunTool(
      {q.python, "-m", "torch.distributed.flight_recorder.fr_trace", q.dir, "-p", kFrPrefix},
      q.tool_timeout);
  side.text += "fr_trace (" + q.python + " -m torch.distributed.flight_recorder.fr_trace):\n";
  side.text += r.error.empty() ? LastLines(r.output, kAnalysisLines) : "  " + r.error + "\n";
  return side;
}

}  // namespace ddprun::supervisor
