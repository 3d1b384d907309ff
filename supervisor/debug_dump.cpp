#include "supervisor/debug_dump.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <tuple>

#include "base/format.hpp"
#include "base/read_file.hpp"
#include "base/unique_fd.hpp"
#include "env/processes.hpp"
#include "env/trace_file.hpp"
#include "supervisor/python_stacks.hpp"
#include "supervisor/torch_progress.hpp"

extern char** environ;

namespace ddprun::supervisor {
namespace {

using Clock = std::chrono::system_clock;
using Steady = std::chrono::steady_clock;

constexpr size_t kMaxToolOutput = 4 << 20;
constexpr size_t kSummaryStackLines = 15;

// posix_spawn's attribute and file-action objects, destroyed on scope exit.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

// The child: stdin /dev/null, stdout and stderr the pipe, its own process
// group (so the deadline kill reaches anything it starts), default signal
// dispositions and an empty mask (the launcher blocks or handles some).
void Configure(SpawnSetup& s, int out_fd) {
  posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&s.actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&s.actions, out_fd, 2);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&s.attr, &all);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setpgroup(&s.attr, 0);
  posix_spawnattr_setflags(&s.attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
}

// The running dump's interruption and tool environment (DumpRequest), for
// RunTool in every thread of the dump; set by WriteDebugDump for its length.
struct ToolContext {
  std::function<bool()> interrupted;
  std::string env_entry;
};
std::mutex g_tool_mutex;
ToolContext g_tool_context;

ToolContext CurrentToolContext() {
  std::lock_guard<std::mutex> lock(g_tool_mutex);
  return g_tool_context;
}

class ScopedToolContext {
 public:
  explicit ScopedToolContext(ToolContext c) {
    std::lock_guard<std::mutex> lock(g_tool_mutex);
    g_tool_context = std::move(c);
  }
  ~ScopedToolContext() {
    std::lock_guard<std::mutex> lock(g_tool_mutex);
    g_tool_context = {};
  }
  ScopedToolContext(const ScopedToolContext&) = delete;
  ScopedToolContext& operator=(const ScopedToolContext&) = delete;
};

enum class ReadEnd { kEof, kDeadline, kInterrupted };

// Reads `fd` until EOF, the deadline, or `interrupted` (polled every 100 ms).
ReadEnd ReadUntil(int fd, Steady::time_point deadline, const std::function<bool()>& interrupted,
                  std::string& out) {
  constexpr std::chrono::milliseconds kPollSlice{100};
  char buf[65536];
  for (;;) {
    if (interrupted && interrupted()) return ReadEnd::kInterrupted;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
    if (left.count() <= 0) return ReadEnd::kDeadline;
    pollfd p{fd, POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min(left, kPollSlice).count()) + 1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;  // timeout: the loop head checks the deadline
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ReadEnd::kEof;
    const size_t room = kMaxToolOutput - std::min(out.size(), kMaxToolOutput);
    out.append(buf, std::min(room, static_cast<size_t>(n)));  // keeps draining past the cap
  }
}

// Waits for `pid`; -1 unless it exited normally.
int Reap(pid_t pid) {
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (r != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

std::string TrimNewline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// "<tid> <name> <state> <wchan>" from /proc/<pid>/task/<tid>/{stat,wchan}.
std::string ThreadLine(const std::filesystem::path& task) {
  const std::string stat = ReadSmallFile((task / "stat").string());
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size()) {
    return task.filename().string() + " (gone)";
  }
  const std::string wchan = TrimNewline(ReadSmallFile((task / "wchan").string()));
  return task.filename().string() + " " + stat.substr(open + 1, close - open - 1) + " " +
         stat[close + 2] + " " + (wchan.empty() || wchan == "0" ? "-" : wchan);
}

std::vector<std::filesystem::path> Tasks(pid_t pid) {
  std::vector<std::filesystem::path> tasks;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    tasks.push_back(e.path());
  }
  std::sort(tasks.begin(), tasks.end(), [](const auto& a, const auto& b) {
    return std::atol(a.filename().c_str()) < std::atol(b.filename().c_str());
  });
  return tasks;
}

std::string Describe(const std::string& tool, const ToolResult& r) {
  if (!r.error.empty()) return r.error + "\n";
  std::string text = r.output;
  if (!text.empty() && text.back() != '\n') text += '\n';
  if (r.cut_short) {
    text += "[" + tool +
            " cut short: ddprun was told to stop during the dump; the output above "
            "is partial]\n";
  } else if (r.timed_out) {
    text += "[" + tool + " did not finish in time: killed, the output above is partial]\n";
  } else if (r.exit_code != 0) {
    text += "[" + tool + " exited with " + std::to_string(r.exit_code) + "]\n";
  }
  return text;
}

std::string TraceSection(const RankDump& d, size_t max_entries, Clock::time_point now) {
  std::string text = "== flight recorder (" +
                     (d.target.trace_file.empty() ? std::string("none") : d.target.trace_file) +
                     ") ==\n";
  if (!d.trace_error.empty()) return text + d.trace_error + "\n";
  const size_t n = std::min(max_entries, d.trace.size());
  text += "last " + std::to_string(n) + " of " + std::to_string(d.trace.size()) + " entries:\n";
  for (size_t i = d.trace.size() - n; i < d.trace.size(); ++i) {
    text += "  " + FormatTraceEntry(d.trace[i], now) + "\n";
  }
  return text;
}

std::string LocalTime(Clock::time_point t) {
  const time_t secs = Clock::to_time_t(t);
  tm local{};
  localtime_r(&secs, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

// ", 3.0 s of it counted" when pauses (a stopped worker, a stalled console)
// were left out of the time since; "" otherwise.
std::string Counted(const HungRank& h, Clock::time_point now) {
  const Clock::time_point at = h.observed == Clock::time_point{} ? now : h.observed;
  const double since = std::chrono::duration<double>(at - h.since).count();
  if (h.counted_seconds < 0 || since - h.counted_seconds < 0.5) return "";
  char text[80];
  std::snprintf(text, sizeof(text), ", %.1f s of it counted: the rest was paused",
                h.counted_seconds);
  return text;
}

std::string SecondsSince(Clock::time_point since, Clock::time_point now) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(now - since).count());
  return buf;
}

std::string Indent(const std::string& lines, size_t by = 2) {
  std::string out;
  std::stringstream in(lines);
  for (std::string line; std::getline(in, line);) out += std::string(by, ' ') + line + "\n";
  return out;
}

std::string RankList(const std::vector<int>& ranks) {
  return ranks.empty() ? "none" : JoinRanks(ranks);
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Internal("write " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

// One thread per target; inline when no thread can be started (the very
// process/thread limit a hang may come with).
std::vector<RankDump> CollectAll(const DumpRequest& request) {
  std::vector<RankDump> dumps(request.targets.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < request.targets.size(); ++i) {
    auto collect = [&request, &dumps, i] {
      dumps[i] = CollectRankDump(request.targets[i], request.tool_timeout);
    };
    try {
      threads.emplace_back(collect);
    } catch (const std::system_error&) {
      collect();
    }
  }
  for (std::thread& t : threads) t.join();
  return dumps;
}

TraceAnalysis Analyze(const std::vector<RankDump>& dumps, const std::map<int, std::string>& unseen,
                      Clock::time_point now, bool hung) {
  std::map<int, std::vector<env::TraceEntry>> traces;
  std::map<int, std::string> no_trace = unseen;
  for (const RankDump& d : dumps) {
    if (d.trace_error.empty()) {
      traces[d.target.rank] = d.trace;
    } else {
      no_trace[d.target.rank] = d.trace_error;
    }
  }
  return AnalyzeTraces(traces, no_trace, now, hung);
}

}  // namespace

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr && *path != '\0' ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

ToolResult RunTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  ToolResult r;
  if (argv.empty()) return ToolResult{"", -1, false, false, "no program given"};
  const std::string path = argv[0].find('/') != std::string::npos ? argv[0] : FindOnPath(argv[0]);
  if (path.empty()) return ToolResult{"", -1, false, false, argv[0] + ": not found on PATH"};
  int fds[2];
  // O_CLOEXEC: a tool spawned by another dump thread at the same time must
  // not inherit this pipe, or this read would wait for that tool too.
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return ToolResult{"", -1, false, false, argv[0] + ": pipe: " + std::strerror(errno)};
  }
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  SpawnSetup setup;
  Configure(setup, write_end.get());
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const ToolContext context = CurrentToolContext();
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  if (!context.env_entry.empty()) envp.push_back(const_cast<char*>(context.env_entry.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc =
      posix_spawn(&pid, path.c_str(), &setup.actions, &setup.attr, args.data(), envp.data());
  if (rc != 0) return ToolResult{"", -1, false, false, argv[0] + ": spawn: " + std::strerror(rc)};
  write_end.Reset();
  const ReadEnd end =
      ReadUntil(read_end.get(), Steady::now() + timeout, context.interrupted, r.output);
  r.timed_out = end == ReadEnd::kDeadline;
  r.cut_short = end == ReadEnd::kInterrupted;
  if (end != ReadEnd::kEof) kill(-pid, SIGKILL);
  r.exit_code = Reap(pid);
  return r;
}

std::string FormatProcState(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream status(dir + "/status");
  if (!status) return "process " + std::to_string(pid) + " is gone\n";
  std::string text, line;
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0 || line.rfind("Threads:", 0) == 0) text += line + "\n";
  }
  text += "wchan:\t" + TrimNewline(ReadSmallFile(dir + "/wchan")) + "\n";
  text += "threads (tid name state wchan):\n";
  for (const auto& task : Tasks(pid)) text += "  " + ThreadLine(task) + "\n";
  return text;
}

RankDump CollectRankDump(const DumpTarget& target, std::chrono::milliseconds tool_timeout) {
  RankDump d;
  d.target = target;
  const std::string pid = std::to_string(target.pid);
  // /proc first: while a tool is attached, every thread shows "t (tracing stop)".
  d.proc_state = FormatProcState(target.pid);
  // The rank, or a process below it that it waits for (a wrapper's program,
  // a relayed child, an mp.spawn child), as the pause watch finds it.
  std::tie(d.stopped_pid, d.stopped) = env::StoppedInTree(target.pid);
  if (d.stopped == 0 && target.python_pid != 0) {
    d.stopped = env::StoppedState(target.python_pid);
    d.stopped_pid = d.stopped != 0 ? target.python_pid : 0;
  }
  // The recorder before the tools, which take seconds: every rank's at about
  // the same moment (one thread per rank), while they may still run.
  if (target.trace_file.empty()) {
    d.trace_error = kNoFlightRecorder;
  } else if (auto trace = env::ReadTraceFile(target.trace_file); trace.ok()) {
    d.trace = std::move(*trace);
  } else {
    d.trace_error = trace.status().code() == StatusCode::kNotFound ? kNoFlightRecorder
                                                                   : trace.status().message();
  }
  if (std::string eu = FindOnPath("eu-stack"); !eu.empty()) {
    d.native_tool = "eu-stack";
    d.native = RunTool({eu, "-p", pid}, tool_timeout);
  } else if (std::string gdb = FindOnPath("gdb"); !gdb.empty()) {
    d.native_tool = "gdb";
    d.native = RunTool({gdb, "-p", pid, "-batch", "-ex", "thread apply all bt"}, tool_timeout);
  } else {
    d.native.error = "no native stacks: neither eu-stack (elfutils) nor gdb is installed";
  }
  const pid_t python = target.python_pid != 0 ? target.python_pid : target.pid;
  if (std::string py_spy = FindPySpy(python); !py_spy.empty()) {
    d.python = RunTool({py_spy, "dump", "--pid", std::to_string(python)}, tool_timeout);
    if (python != target.pid) {
      d.python.output.insert(0, "the rank's Python, pid " + std::to_string(python) +
                                    ", under the worker (pid " + pid + "):\n");
    }
    d.python.output += ChildStacks(py_spy, python, tool_timeout);
    if (python != target.pid)
      d.python.output += OtherStacks(py_spy, target.pid, python, tool_timeout);
  } else {
    d.python.error = "no Python stacks: py-spy is not installed (pip install py-spy)";
  }
  return d;
}

std::string FormatRankDump(const RankDump& d, size_t trace_entries, Clock::time_point now) {
  const DumpTarget& t = d.target;
  std::string text = "rank " + std::to_string(t.rank) + " (local rank " +
                     std::to_string(t.local_rank) + ", pid " + std::to_string(t.pid) +
                     "), dumped at " + LocalTime(now) + "\n\n";
  text += "== /proc/" + std::to_string(t.pid) + " ==\n" + d.proc_state + "\n";
  text += "== native stacks (" + (d.native_tool.empty() ? "none" : d.native_tool) + ") ==\n";
  text += Describe(d.native_tool, d.native) + "\n";
  text += "== python stacks (py-spy) ==\n" + Describe("py-spy", d.python) + "\n";
  text += TraceSection(d, trace_entries, now);
  return text;
}

std::string FormatSummary(const DumpRequest& request, const std::vector<RankDump>& dumps,
                          const TraceAnalysis& analysis, Clock::time_point now,
                          const std::string& torch_text) {
  std::string text = "ddprun debug dump at " + LocalTime(now) + ": " +
                     std::to_string(dumps.size()) + " workers, in " + request.dir + "\n";
  std::vector<int> hung;
  for (const HungRank& h : request.hung) hung.push_back(h.rank);
  text += "hung ranks: " + RankList(hung) + "\n";
  for (const HungRank& h : request.hung) {
    text += "  rank " + std::to_string(h.rank) +
            (h.at_exit ? ": hung at exit, finishing (heartbeat file removed) since "
                       : ": silent since ") +
            LocalTime(h.since) + " (" + SecondsSince(h.since, now) + Counted(h, now) + ")\n";
  }
  std::vector<int> beating;  // a stopped rank does not beat: it is told below
  for (int r : request.beating) {
    const bool stopped = std::any_of(dumps.begin(), dumps.end(), [r](const RankDump& d) {
      return d.target.rank == r && d.stopped != 0;
    });
    if (!stopped) beating.push_back(r);
  }
  text += "ranks still beating: " + RankList(beating) + "\n";
  for (const RankDump& d : dumps) {
    if (d.stopped == 0) continue;
    const std::string pid = std::to_string(d.stopped_pid);
    // The rank itself, or a process below it that it waits for (attack 118: the child's pid
    // was given as the rank's).
    const std::string who = d.stopped_pid == d.target.pid
                                ? " (pid " + pid + ") was "
                                : " (pid " + std::to_string(d.target.pid) + ") waits for pid " +
                                      pid + " below it, which was ";
    text += "rank " + std::to_string(d.target.rank) + who + env::WhyStopped(d.stopped) +
            " as the dump began: the ranks in a collective with it wait for it (" +
            (d.stopped == 't' ? "the debugger's continue" : "kill -CONT " + pid) +
            " lets it run)\n";
  }
  text += "\n";
  const auto at_exit = [&](int rank) {
    return std::any_of(request.hung.begin(), request.hung.end(),
                       [rank](const HungRank& h) { return h.rank == rank && h.at_exit; });
  };
  const bool all_at_exit =
      !request.hung.empty() && std::all_of(request.hung.begin(), request.hung.end(),
                                           [](const HungRank& h) { return h.at_exit; });
  if (all_at_exit && analysis.verdict == TraceVerdict::kNoTraces) {
    text +=
        "flight recorders: not compared: every hung rank had finished its program, its "
        "collectives behind it; the stacks below show what its exit waits for\n\n";
  } else if (torch_text.empty() || analysis.verdict != TraceVerdict::kNoTraces) {
    text +=
        analysis.text + "\n";  // a PyTorch job has no ddprun flight recorder: said by torch_text
  }
  if (!torch_text.empty()) text += torch_text + "\n";
  text += "main thread stacks (Python where py-spy could read them; first " +
          std::to_string(kSummaryStackLines) + " frames):\n";
  for (const RankDump& d : dumps) {
    text += "rank " + std::to_string(d.target.rank) + " (pid " + std::to_string(d.target.pid) +
            "), rank_" + std::to_string(d.target.rank) + ".txt:\n";
    std::string stack = MainThreadPythonStack(d.python.output, kSummaryStackLines);
    if (stack.empty()) stack = MainThreadStack(d.native.output, d.target.pid, kSummaryStackLines);
    if (stack.empty()) {
      stack = d.native.error.empty() ? "(no stack of the main thread: see the rank file)\n"
                                     : d.native.error + "\n";
    }
    text += Indent(stack);
    if (!at_exit(d.target.rank)) continue;
    // Hung at exit: the main thread waits in the interpreter's exit; the threads it waits for
    // are the cause (a thread that is not a daemon).
    if (std::string others = OtherPythonThreads(d.python.output, 4, 6); !others.empty()) {
      text +=
          "  its other threads (its exit waits for those that are not daemons; first 6 frames):\n" +
          Indent(others, 4);
    }
  }
  return text;
}

void FindTorchPythons(DumpRequest& request) {
  for (DumpTarget& t : request.targets) {
    const auto python = ReadTorchPython(request.torch_dir, t.rank);
    if (!python) continue;
    if (python->pid != t.pid) t.python_pid = python->pid;
    if (request.python.empty()) request.python = python->executable;
  }
}

StatusOr<DumpResult> WriteDebugDump(const DumpRequest& request) {
  ScopedToolContext tools({request.interrupted, request.tool_env_entry});
  // Files that cannot be written (a full disk) lose what they hold, not the
  // summary: it is printed all the same, saying what was not kept.
  std::string not_kept;
  auto keep = [&](const Status& s) {
    if (!s.ok() && not_kept.empty()) not_kept = s.message();
  };
  std::error_code ec;
  std::filesystem::create_directories(request.dir, ec);
  if (ec) keep(Internal("create " + request.dir + ": " + ec.message()));
  TorchSide torch;
  if (!request.torch_dir.empty()) {
    std::vector<int> ranks;
    for (const DumpTarget& t : request.targets) ranks.push_back(t.rank);
    torch = CollectTorchSide({request.torch_dir, request.dir + "/torch", ranks, request.python,
                              request.nccl_ras_addr, request.tool_timeout, 4 * request.tool_timeout,
                              request.beating});
  }
  const std::vector<RankDump> dumps = CollectAll(request);
  const Clock::time_point now = Clock::now();
  for (const RankDump& d : dumps) {
    const std::string path = request.dir + "/rank_" + std::to_string(d.target.rank) + ".txt";
    if (not_kept.empty()) keep(WriteFile(path, FormatRankDump(d, request.trace_entries, now)));
  }
  const TraceAnalysis analysis = Analyze(dumps, request.unseen, now, !request.hung.empty());
  DumpResult result{FormatSummary(request, dumps, analysis, now, torch.text), analysis.stragglers,
                    false, ""};
  // Behind, else waiting for each other: the root cause is among them.
  for (int r : torch.laggards.empty() ? torch.deadlocked : torch.laggards) {
    if (std::find(result.stragglers.begin(), result.stragglers.end(), r) ==
        result.stragglers.end()) {
      result.stragglers.push_back(r);
    }
  }
  result.all_waiting = result.stragglers.empty() &&
                       (analysis.verdict == TraceVerdict::kAllInside || torch.all_waiting);
  if (not_kept.empty()) keep(WriteFile(request.dir + "/summary.txt", result.summary));
  result.not_kept = not_kept;
  return result;
}

}  // namespace ddprun::supervisor
