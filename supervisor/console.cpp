#include "supervisor/console.hpp"

#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "base/unique_fd.hpp"

namespace ddprun::supervisor {

namespace {

constexpr size_t kDefaultCapacity = 4 << 20;

uint64_t CountLines(std::string_view data) {
  uint64_t n = static_cast<uint64_t>(std::count(data.begin(), data.end(), '\n'));
  return n + (!data.empty() && data.back() != '\n' ? 1 : 0);
}

}  // namespace

// Where what was queued last on one file did not end a line. Shared by the
// writers of descriptors that are one file (stdout and stderr on one
// terminal, or `> log 2>&1`), so that the launcher's line on stderr starts
// a line of its own after a worker's progress bar on stdout. Locked after a
// writer's own mutex, never before.
struct ConsoleWriter::LineEnd {
  std::mutex mu;
  State* mid_line = nullptr;  // whose last bytes did not end a line
};

struct ConsoleWriter::State {
  int fd = -1;
  std::mutex mu;
  std::condition_variable work;  // the writer waits for lines
  std::condition_variable idle;  // Flush waits for an empty queue
  std::deque<std::string> queue;
  size_t bytes = 0;  // queued, including the chunk being written
  size_t capacity = kDefaultCapacity;
  bool in_flight = false;
  bool broken = false;  // write failed (closed console): nothing more is written
  bool started = false;
  bool threadless = false;            // no thread could be made: writes are synchronous
  bool want_room = false;             // WriteOrHold() found the queue full: notify when it empties
  std::function<void()> notify_room;  // SetRoomNotifier
  std::shared_ptr<LineEnd> line_end;  // this file's, with the other writers of it
  std::atomic<uint64_t> own_line_breaks{0};

  // Ends another's unfinished line on this file (for an own line or a notice):
  // whether a '\n' is due first. That writer's stream is told by its count.
  bool EndLineOfAny() {
    std::lock_guard l(line_end->mu);
    State* other = line_end->mid_line;
    line_end->mid_line = nullptr;
    if (other == nullptr) return false;
    other->own_line_breaks.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void Queued(std::string_view data) {
    std::lock_guard l(line_end->mu);
    if (data.back() != '\n') {
      line_end->mid_line = this;
    } else if (line_end->mid_line == this) {
      line_end->mid_line = nullptr;
    }
  }
  uint64_t dropped_total = 0;
  uint64_t dropped_pending = 0;  // not yet told in a notice
  std::string where_kept;

  void QueueNotice() {
    if (dropped_pending == 0) return;
    std::string notice =
        "[ddprun: " + std::to_string(dropped_pending) + " lines not shown: console not reading; " +
        (where_kept.empty() ? std::string("no log file keeps them") : "see " + where_kept) + "]\n";
    dropped_pending = 0;
    if (EndLineOfAny()) notice.insert(0, "\n");
    bytes += notice.size();
    queue.push_back(std::move(notice));
  }

  void Run() {
    // Every signal is blocked here (from the start: Write): a closed console's
    // SIGPIPE (thread-directed) stays pending instead of killing the launcher,
    // and the launcher's signals go to the threads that handle them.
    std::unique_lock lock(mu);
    for (;;) {
      work.wait(lock, [this] { return !queue.empty(); });
      std::string chunk = std::move(queue.front());
      queue.pop_front();
      in_flight = true;
      lock.unlock();
      const bool ok = broken || WriteAll(fd, chunk.data(), chunk.size());
      lock.lock();
      in_flight = false;
      bytes -= chunk.size();
      if (!ok) broken = true;
      if (want_room && (broken || bytes <= capacity / 2)) {
        want_room = false;
        if (notify_room) notify_room();
      }
      if (queue.empty()) idle.notify_all();
    }
  }
};

ConsoleWriter::ConsoleWriter(int fd) : state_(new State) { state_->fd = fd; }

ConsoleWriter& ConsoleWriter::For(int fd) {
  static std::mutex mu;
  static auto* writers = new std::map<int, ConsoleWriter*>();  // never destroyed
  // Each file's line end, by (device, inode): one per file, whatever the descriptor.
  static auto* line_ends = new std::map<std::pair<dev_t, ino_t>, std::shared_ptr<LineEnd>>();
  std::lock_guard lock(mu);
  auto& w = (*writers)[fd];
  if (w == nullptr) {
    w = new ConsoleWriter(fd);
    struct stat st {};
    if (fstat(fd, &st) == 0) {
      auto& shared = (*line_ends)[{st.st_dev, st.st_ino}];
      if (!shared) shared = std::make_shared<LineEnd>();
      w->state_->line_end = shared;
    } else {
      w->state_->line_end = std::make_shared<LineEnd>();
    }
  }
  return *w;
}

void ConsoleWriter::Write(std::string_view data, std::string_view where_kept) {
  Put(data, where_kept, false, false);
}

bool ConsoleWriter::WriteOrHold(std::string_view data) { return Put(data, {}, false, true); }

void ConsoleWriter::WriteOwnLine(std::string_view text) { Put(text, {}, true, false); }

void ConsoleWriter::SetRoomNotifier(std::function<void()> notify) {
  std::lock_guard lock(state_->mu);
  state_->notify_room = std::move(notify);
}

bool ConsoleWriter::Put(std::string_view data, std::string_view where_kept, bool own_line,
                        bool keep) {
  if (data.empty()) return true;
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (s.broken) return true;  // a closed console must not stop the job
  if (!s.started) {
    s.started = true;
    sigset_t all, saved;  // the thread starts with every signal blocked (see Run)
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    try {
      std::thread([&s] { s.Run(); }).detach();
    } catch (const std::system_error&) {
      s.threadless = true;  // out of threads: better slow output than none
    }
    pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  }
  std::string ended;  // the line before `data`, ended first
  if (own_line && s.EndLineOfAny()) {
    ended = "\n" + std::string(data);
    data = ended;
  }
  if (s.threadless) {
    if (!WriteAll(s.fd, data.data(), data.size())) s.broken = true;
    s.Queued(data);
    return true;
  }
  // The launcher's own lines (a failure report) have room beyond the bound
  // that the workers' output fills while the console does not read.
  const size_t bound = own_line ? 2 * s.capacity : s.capacity;
  if (!keep && !s.queue.empty() && s.bytes + data.size() > bound) {
    const uint64_t lines = CountLines(data);
    s.dropped_pending += lines;
    s.dropped_total += lines;
    if (!where_kept.empty()) s.where_kept = std::string(where_kept);
    return false;
  }
  s.QueueNotice();
  s.bytes += data.size();
  s.queue.emplace_back(data);
  s.Queued(data);
  s.work.notify_one();
  if (s.bytes < s.capacity) return true;
  s.want_room = true;
  return false;
}

const std::atomic<uint64_t>& ConsoleWriter::own_line_breaks() const {
  return state_->own_line_breaks;
}

bool ConsoleWriter::Flush(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (s.threadless || !s.started) return true;
  s.QueueNotice();
  s.work.notify_one();
  return s.idle.wait_for(lock, timeout, [&s] { return s.queue.empty() && !s.in_flight; });
}

uint64_t ConsoleWriter::dropped_lines() const {
  std::lock_guard lock(state_->mu);
  return state_->dropped_total;
}

void ConsoleWriter::set_capacity(size_t bytes) {
  std::lock_guard lock(state_->mu);
  state_->capacity = bytes;
}

void FlushConsole(std::chrono::milliseconds timeout) {
  ConsoleWriter::For(STDOUT_FILENO).Flush(timeout);
  ConsoleWriter::For(STDERR_FILENO).Flush(timeout);
}

namespace {

class ConsoleSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  ConsoleSink() : color_(isatty(STDERR_FILENO) == 1) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string line(formatted.data(), formatted.size());
    if (color_ && msg.color_range_end > msg.color_range_start) {
      line.insert(msg.color_range_end, "\033[m");
      line.insert(msg.color_range_start, Color(msg.level));
    }
    ConsoleWriter::For(STDERR_FILENO).WriteOwnLine(line);
  }
  void flush_() override {}

 private:
  static const char* Color(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::trace:
        return "\033[37m";
      case spdlog::level::debug:
        return "\033[36m";
      case spdlog::level::info:
        return "\033[32m";
      case spdlog::level::warn:
        return "\033[33m\033[1m";
      case spdlog::level::err:
        return "\033[31m\033[1m";
      case spdlog::level::critical:
        return "\033[1m\033[41m";
      default:
        return "";
    }
  }
  bool color_;
};

}  // namespace

std::shared_ptr<spdlog::sinks::sink> ConsoleLogSink() { return std::make_shared<ConsoleSink>(); }

}  // namespace ddprun::supervisor
