// Workers that wait for the console (a pager left open, Ctrl-S, a stuck log
// shipper): the job waits for them as for a stopped worker, so the hang
// limits and file timers do not count that time (pauses.cpp).
#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "env/processes.hpp"
#include "supervisor/pipe_reader.hpp"
#include "supervisor/supervisor.hpp"

namespace ddprun::supervisor {

namespace {

// Told after this long: a console slower than the output makes workers wait for moments.
constexpr std::chrono::seconds kTellAfter{2};

double Seconds(SteadyTime::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// Where `pid`, or a child it waits for (a tool it runs, which inherited the
// console), is blocked writing to ddprun's console: in any of its threads
// (a logging thread the main one waits for), the main one looked at first.
std::optional<Supervisor::ConsoleBlock> Supervisor::BlockedOnConsole(pid_t pid, int depth) const {
  constexpr int kMaxDepth = 3;
  constexpr size_t kMaxThreads = 1024;  // a look stays cheap
  for (pid_t tid : env::ThreadsOf(pid, kMaxThreads)) {
    const std::optional<env::BlockedCall> call = env::ReadBlockedCall(pid, tid);
    if (!call) continue;
    if (call->kind == env::BlockedCall::kWaitChild) {
      if (depth >= kMaxDepth) continue;
      for (pid_t child : env::ChildrenOf(pid, tid)) {
        if (auto blocked = BlockedOnConsole(child, depth + 1)) return blocked;
      }
      continue;
    }
    if (call->kind != env::BlockedCall::kWrite) continue;
    struct stat st {};
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(call->fd);
    if (stat(path.c_str(), &st) != 0) continue;
    for (const FileId& console : console_files_) {
      if (console == FileId{st.st_dev, st.st_ino}) return ConsoleBlock{call->fd, pid, tid};
    }
  }
  return std::nullopt;
}

bool Supervisor::LookForConsoleWait(SteadyTime now, bool held_otherwise) {
  const std::vector<WorkerRecord>& workers = running_->workers();
  std::optional<size_t> waiting;
  std::string what;
  for (const auto& r : readers_) {
    // Held for a file console that is now stuck: a log file keeps these
    // lines, so the worker goes on and the console drops them instead.
    if (r->held() && r->keeps && r->console->stuck()) r->Resume();
  }
  for (const auto& r : readers_) {
    if (r->held() && r->worker < workers.size()) {
      waiting = r->worker;
      what = r->keeps ? "to write its output (ddprun holds it: the console, a file, "
                        "falls behind)"
                      : "to write its output (ddprun holds it: no log file keeps it)";
      break;
    }
  }
  for (size_t i = 0; !waiting && i < workers.size(); ++i) {
    if (workers[i].state != WorkerState::kRunning) continue;
    if (auto blocked = BlockedOnConsole(workers[i].pid, 0)) {
      waiting = i;
      const std::string console = "fd " + std::to_string(blocked->fd) + ", ddprun's console";
      const std::string in_thread = blocked->tid == blocked->pid
                                        ? ""
                                        : "in its thread " + std::to_string(blocked->tid) + " (" +
                                              env::ThreadName(blocked->pid, blocked->tid) + ") ";
      what = blocked->pid == workers[i].pid
                 ? in_thread + "to write to " + console + ", which it writes to directly"
                 : "for its process " + std::to_string(blocked->pid) + ", which waits " +
                       in_thread + "to write to " + console + " (inherited)";
    }
  }
  if (!waiting) {
    if (console_told_) {
      spdlog::info(
          "the console reads again after {:.1f} s{}", Seconds(now - console_wait_since_),
          held_otherwise ? "; the job still waits (see above)" : "; the hang limits count again");
    }
    console_waiting_ = console_told_ = false;
    console_held_ = HeldWorker{};
    return false;
  }
  if (!console_waiting_) {
    console_waiting_ = true;
    console_wait_since_ = now;
  }
  // The other nodes are told at once: their limits, as this node's, wait from now.
  const WorkerRecord& held = workers[*waiting];
  console_held_ = HeldWorker::Local('C', held.rank, held.local_rank, held.pid);
  if (!console_told_ && now - console_wait_since_ >= kTellAfter) {
    console_told_ = true;
    const WorkerRecord& w = workers[*waiting];
    spdlog::warn(
        "the console has not read for {:.1f} s (a pager, Ctrl-S, a stuck log shipper): rank {} "
        "(local_rank {}, pid {}) waits {}, and the job waits with it, so the hang limits "
        "and file timers do not count the time until the console reads again",
        Seconds(now - console_wait_since_), w.rank, w.local_rank, w.pid, what);
  }
  return true;
}

}  // namespace ddprun::supervisor
