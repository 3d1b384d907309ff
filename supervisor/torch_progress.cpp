#include "supervisor/torch_progress.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <thread>

#include "base/format.hpp"
#include "base/unique_fd.hpp"
#include "supervisor/debug_dump.hpp"
#include "supervisor/nccl_ras.hpp"

namespace ddprun::supervisor {
namespace {

// Never throws: a path too long, or a directory removed meanwhile, is just not there (attack
// 102: std::filesystem::exists threw on a --log_dir of 4044 characters, and ddprun died).
bool PathExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

constexpr char kFrPrefix[] = "nccl_trace_rank_";
constexpr size_t kAnalysisLines = 30;

std::string Rank(int r) { return std::to_string(r); }

// PyTorch's heartbeat monitor (NCCL) reads one line from the pipe and dumps.
// No reader (Gloo, or a process gone): open fails with ENXIO, and the hook's
// request file asks instead.
bool WritePipe(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  return fd.get() >= 0 && write(fd.get(), "1\n", 2) == 2;
}

bool AllDumped(const std::string& dir, const std::vector<int>& ranks) {
  return std::all_of(ranks.begin(), ranks.end(),
                     [&](int r) { return PathExists(dir + "/" + kFrPrefix + Rank(r)); });
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

// A global rank as the hook writes it; kUnknownPeer for anything else (a
// damaged line's, or one too long for a rank).
int RankNumber(const std::string& text) {
  const bool digits =
      !text.empty() && text.size() <= 9 &&
      std::all_of(text.begin(), text.end(), [](unsigned char c) { return c >= '0' && c <= '9'; });
  return digits ? std::stoi(text) : TorchProgress::kUnknownPeer;
}

std::string DumpPath(const std::string& dir, int r) { return dir + "/" + kFrPrefix + Rank(r); }

// Asks each rank for its flight recorder and waits for the files, then moves
// them to `out`. The files come from other processes: polled every 100 ms
// until the deadline. Says of each rank how it was asked and whether its
// dump came.
std::string RequestDumps(const std::string& dir, const std::string& out,
                         const std::vector<int>& ranks, std::chrono::milliseconds wait,
                         bool* any_piped) {
  std::error_code ec;
  for (int r : ranks) std::filesystem::remove(DumpPath(dir, r), ec);  // an earlier dump's
  // A new token: the hook answers each request once.
  const std::string token =
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "\n";
  std::ofstream(dir + "/dump_request.tmp") << token;
  std::filesystem::rename(dir + "/dump_request.tmp", dir + "/dump_request", ec);
  std::vector<bool> piped;
  for (int r : ranks) piped.push_back(WritePipe(dir + "/pipe_" + Rank(r) + ".pipe"));
  *any_piped = std::find(piped.begin(), piped.end(), true) != piped.end();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!AllDumped(dir, ranks) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!out.empty() && out != dir) std::filesystem::create_directories(out, ec);
  const std::string seconds = FormatSeconds(static_cast<double>(wait.count()) / 1e3);
  std::string how;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    const bool came = PathExists(DumpPath(dir, r));
    if (came && !out.empty() && out != dir) {
      std::filesystem::rename(DumpPath(dir, r), DumpPath(out, r), ec);
    }
    how += "rank " + Rank(r) + ": ";
    if (came) {
      how += piped[i] ? "dumped through PyTorch's pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE)"
                      : "dumped by ddprun's hook (Gloo has no PyTorch dump pipe in torch 2.x)";
    } else {
      how += "no dump within " + seconds + " s: " +
             (piped[i] ? "PyTorch's pipe took the request and wrote nothing"
                       : "ddprun's hook did not answer (the rank holds Python's GIL, has exited, "
                         "or made no process group)");
    }
    how += "\n";
  }
  return how;
}

}  // namespace

std::optional<TorchPython> ReadTorchPython(const std::string& dir, int rank) {
  std::ifstream in(dir + "/python_" + Rank(rank));
  TorchPython p;
  in >> p.pid;
  std::getline(in >> std::ws, p.executable);
  if (!in || p.pid <= 0 || p.executable.empty()) return std::nullopt;
  return p;
}

bool ProgressRecorded(const std::string& dir, int rank) {
  return PathExists(dir + "/progress_" + Rank(rank));
}

std::vector<TorchProgress> ReadTorchProgress(const std::string& dir,
                                             const std::vector<int>& ranks) {
  std::vector<TorchProgress> out;
  for (int r : ranks) {
    const size_t before = out.size();
    std::ifstream in(dir + "/progress_" + Rank(r));
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      TorchProgress p;
      p.rank = r;
      std::string state, members = "*";
      if (line.rfind("p2p ", 0) == 0) {
        std::string tag, peer;
        if (!(fields >> tag >> p.op >> peer) || (p.op != "send" && p.op != "recv")) continue;
        p.p2p = p.entered = true;
        p.peer = peer == "*" ? TorchProgress::kAnyPeer : RankNumber(peer);
      } else if (!(fields >> p.seq >> p.op >> state) || p.seq < 0) {
        continue;
      }
      if (!p.p2p) p.entered = state == "entered";
      p.raised = !p.p2p && state == "raised";
      fields >> p.group >> members;
      std::getline(fields >> std::ws, p.desc);
      p.everyone = members == "*";
      std::istringstream list(members);
      for (std::string m; !p.everyone && std::getline(list, m, ',');) {
        if (const int rank = RankNumber(m); rank >= 0) p.members.push_back(rank);
      }
      out.push_back(p);
    }
    if (out.size() == before) {  // no file, or nothing in it the hook writes
      TorchProgress none;
      none.rank = r;
      out.push_back(none);
    }
  }
  return out;
}

TorchSide CollectTorchSide(const TorchQuery& q) {
  const std::string out = q.out.empty() ? q.dir : q.out;
  TorchSide side = NameLaggards(ReadTorchProgress(q.dir, q.ranks), q.beating);
  side.text += "pytorch flight recorder (" + out + "):\n";
  bool nccl = false;  // a rank read PyTorch's NCCL dump pipe
  side.text += LastLines(RequestDumps(q.dir, out, q.ranks, q.wait, &nccl), q.ranks.size());
  if (!q.nccl_ras_addr.empty()) {
    const RasReport ras = QueryNcclRas(q.nccl_ras_addr, q.tool_timeout);
    // Nobody listening, in a job with no NCCL rank here (Gloo): nothing to say.
    const bool none = !nccl && ras.raw.empty() && ras.error.find("refused") != std::string::npos;
    if (!ras.raw.empty()) {
      std::ofstream(out + (ras.json ? "/nccl_ras.json" : "/nccl_ras.txt")) << ras.raw;
    }
    if (!none) {
      side.text += "nccl ras (NCCL_RAS_ADDR=" + q.nccl_ras_addr + "):\n" + SummarizeRas(ras);
    }
  }
  if (q.python.empty()) {
    side.text +=
        "  no analysis: no rank's Python made a process group that the hook saw (the "
        "interpreter to run PyTorch's analyser is not known)\n";
    return side;
  }
  const bool any = std::any_of(q.ranks.begin(), q.ranks.end(),
                               [&](int r) { return PathExists(DumpPath(out, r)); });
  if (!any) {
    side.text += "  no analysis: no rank's flight recorder came\n";
    return side;
  }
  const ToolResult r =
      RunTool({q.python, "-m", "torch.distributed.flight_recorder.fr_trace", out, "-p", kFrPrefix},
              q.tool_timeout);
  side.text += "fr_trace (" + q.python + " -m torch.distributed.flight_recorder.fr_trace):\n";
  if (!r.error.empty()) {
    side.text += "  " + r.error + "\n";
  } else if (r.exit_code != 0 &&
             r.output.find("Traceback (most recent call last):") != std::string::npos) {
    // Its own failure (a rank's dump missing, one it cannot match): its last
    // line says which, its traceback says nothing more to the user.
    side.text += "  fr_trace could not analyse the dumps (exit " + std::to_string(r.exit_code) +
                 "):" + LastLines(r.output, 1).substr(1);
  } else {
    side.text += LastLines(r.output, kAnalysisLines);
  }
  return side;
}

}  // namespace ddprun::supervisor
