#include "supervisor/console.hpp"

#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>

#include "base/unique_fd.hpp"

namespace ddprun::supervisor {

namespace {

constexpr size_t kDefaultCapacity = 4 << 20;

// A write to a regular file that takes longer than this is stuck (an NFS
// server gone, a disk failing): the file is then treated as any console that
// does not read, and lines a log file keeps are dropped again.
constexpr std::chrono::seconds kStuckAfter{2};

// The log files a notice names at most; beyond, their directory.
constexpr size_t kMaxNamed = 64;

// Where the lines a notice counts can be read: "see <file>", or the
// directory that holds every such file.
std::string WhereKept(const std::set<std::string>& files) {
  if (files.empty()) return "no log file keeps them";
  if (files.size() == 1) return "see " + *files.begin();
  const std::string& a = *files.begin();
  const std::string& b = *files.rbegin();  // sorted: the common prefix of all is theirs
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  const size_t slash = a.rfind('/', n == 0 ? 0 : n - 1);
  const std::string dir = slash == std::string::npos || slash == 0 ? "/" : a.substr(0, slash);
  return "see the log files under " + dir;
}

uint64_t CountLines(std::string_view data) {
  uint64_t n = static_cast<uint64_t>(std::count(data.begin(), data.end(), '\n'));
  return n + (!data.empty() && data.back() != '\n' ? 1 : 0);
}

}  // namespace

struct ConsoleWriter::State {
  int fd = -1;
  std::mutex mu;
  std::condition_variable work;  // the writer waits for lines
  std::condition_variable idle;  // Flush waits for an empty queue
  struct Chunk {
    std::string text;
    bool unkept = false;  // no log file keeps it: a worker's, or the launcher's own
  };
  std::deque<Chunk> queue;
  size_t bytes = 0;   // queued, including the chunk being written
  size_t unkept = 0;  // chunks queued or being written that no log file keeps
  size_t capacity = kDefaultCapacity;
  bool in_flight = false;
  std::chrono::steady_clock::time_point in_flight_since{};
  bool broken = false;  // write failed (closed console): nothing more is written
  int error = 0;        // that write's errno
  bool started = false;
  bool threadless = false;            // no thread could be made: writes are synchronous
  bool never_stalls = false;          // a regular file: nothing is dropped, producers wait
  bool want_room = false;             // WriteOrHold() found the queue full: notify when it empties
  std::function<void()> notify_room;  // SetRoomNotifier
  uint64_t chunks_written = 0;        // the console's progress, for Flush()
  bool mid_line = false;              // what was queued last did not end a line
  std::atomic<uint64_t> own_line_breaks{0};

  // Ends a worker's unfinished line (for an own line or a notice): whether a
  // '\n' is due first. The worker's stream is told by the count.
  bool EndLine() {
    if (!mid_line) return false;
    mid_line = false;
    own_line_breaks.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void Queued(std::string_view data) { mid_line = data.back() != '\n'; }
  bool Stuck() const {
    return in_flight && std::chrono::steady_clock::now() - in_flight_since >= kStuckAfter;
  }
  void Broke(int err) {
    broken = true;
    error = err;
  }
  uint64_t dropped_total = 0;
  uint64_t dropped_pending = 0;   // not yet told in a notice
  std::set<std::string> kept_in;  // the log files that keep them
  // Once lines are dropped, they are until half the queue is read: a console
  // slower than the workers then shows whole stretches between few notices
  // (not one notice every few hundred lines, as the queue freed room a line
  // at a time).
  bool dropping = false;
  std::chrono::steady_clock::time_point last_written{};  // the console's last progress
  // The longest the console took nothing while lines were dropped: under a
  // second, it reads, only slower than the workers write.
  std::chrono::steady_clock::duration longest_gap{};

  void QueueNotice() {
    if (dropped_pending == 0) return;
    const auto gap = std::max(longest_gap, std::chrono::steady_clock::now() - last_written);
    const bool reads = gap < std::chrono::seconds(1);
    longest_gap = {};
    std::string notice = "[ddprun: " + std::to_string(dropped_pending) + " lines not shown: " +
                         (reads ? "console slower than the workers; " : "console not reading; ") +
                         WhereKept(kept_in) + "]\n";
    dropped_pending = 0;
    kept_in.clear();
    if (EndLine()) notice.insert(0, "\n");
    bytes += notice.size();
    queue.push_back({std::move(notice), false});
  }

  void Run() {
    // Every signal is blocked here (from the start: Write): a closed console's
    // SIGPIPE (thread-directed) stays pending instead of killing the launcher,
    // and the launcher's signals go to the threads that handle them. All but
    // SIGTTOU: the kernel lets a thread that blocks it write to the terminal
    // from a background job under `stty tostop`; unblocked, the write stops
    // ddprun as it stops any program (fg continues it).
    sigset_t ttou;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_UNBLOCK, &ttou, nullptr);
    std::unique_lock lock(mu);
    for (;;) {
      work.wait(lock, [this] { return !queue.empty(); });
      Chunk chunk = std::move(queue.front());
      queue.pop_front();
      in_flight = true;
      in_flight_since = std::chrono::steady_clock::now();
      lock.unlock();
      const bool ok = broken || WriteAll(fd, chunk.text.data(), chunk.text.size());
      const int err = errno;
      lock.lock();
      in_flight = false;
      bytes -= chunk.text.size();
      if (chunk.unkept) --unkept;
      if (!ok) Broke(err);
      if (ok) {
        const auto now = std::chrono::steady_clock::now();
        if (dropped_pending > 0) longest_gap = std::max(longest_gap, now - last_written);
        last_written = now;
      }
      if (want_room && (broken || bytes <= capacity / 2)) {
        want_room = false;
        if (notify_room) notify_room();
      }
      ++chunks_written;
      idle.notify_all();  // Flush() waits for progress
    }
  }
};

ConsoleWriter::ConsoleWriter(int fd) : state_(new State) {
  state_->fd = fd;
  struct stat st {};
  state_->never_stalls = fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

ConsoleWriter& ConsoleWriter::For(int fd) {
  static std::mutex mu;
  static auto* writers = new std::map<int, ConsoleWriter*>();  // never destroyed
  std::lock_guard lock(mu);
  auto& w = (*writers)[fd];
  if (w != nullptr) return *w;
  // Descriptors of one file (stdout and stderr on one terminal, `2>&1`)
  // share a writer: one queue keeps what each wrote in order, and a line of
  // one never splits a line of the other.
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    for (const auto& [other_fd, other] : *writers) {
      struct stat o {};
      if (other != nullptr && other_fd != fd && fstat(other_fd, &o) == 0 && o.st_dev == st.st_dev &&
          o.st_ino == st.st_ino) {
        w = other;
        return *w;
      }
    }
  }
  w = new ConsoleWriter(fd);
  return *w;
}

bool ConsoleWriter::Write(std::string_view data, std::string_view where_kept) {
  return Put(data, where_kept, false, false);
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
  if (own_line && s.EndLine()) {
    ended = "\n" + std::string(data);
    data = ended;
  }
  if (s.threadless) {
    if (!WriteAll(s.fd, data.data(), data.size())) s.Broke(errno);
    s.Queued(data);
    return true;
  }
  // The launcher's own lines (a failure report) have room beyond the bound
  // that the workers' output fills while the console does not read.
  // A regular file takes everything, only slower than the workers at times:
  // they wait for it instead (as they would writing to it themselves).
  const size_t bound = own_line ? 2 * s.capacity : s.capacity;
  const bool waits = keep || (s.never_stalls && !s.Stuck());  // the producer waits: none lost
  if (s.bytes <= s.capacity / 2) s.dropping = false;  // half the queue read (State::dropping)
  const bool full = !s.queue.empty() && s.bytes + data.size() > bound;
  if (!waits && (full || (s.dropping && !own_line))) {
    if (!own_line) s.dropping = true;
    const uint64_t lines = CountLines(data);
    s.dropped_pending += lines;
    s.dropped_total += lines;
    if (!where_kept.empty() && s.kept_in.size() < kMaxNamed) s.kept_in.emplace(where_kept);
    return true;  // nothing to wait for: the log file has them
  }
  s.QueueNotice();
  s.bytes += data.size();
  const bool unkept = own_line || where_kept.empty();
  s.unkept += unkept ? 1 : 0;
  s.queue.push_back({std::string(data), unkept});
  s.Queued(data);
  s.work.notify_one();
  if (!waits || s.bytes < s.capacity) return true;
  s.want_room = true;
  return false;
}

const std::atomic<uint64_t>& ConsoleWriter::own_line_breaks() const {
  return state_->own_line_breaks;
}

bool ConsoleWriter::Flush(std::chrono::milliseconds idle_limit) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (s.threadless || !s.started) return true;
  s.QueueNotice();
  s.work.notify_one();
  for (;;) {
    const uint64_t seen = s.chunks_written;
    const bool moved = s.idle.wait_for(lock, idle_limit, [&s, seen] {
      return (s.queue.empty() && !s.in_flight) || s.chunks_written != seen;
    });
    if (!moved) return false;
    if (s.queue.empty() && !s.in_flight) return true;
  }
}

bool ConsoleWriter::stuck() const {
  std::lock_guard lock(state_->mu);
  return state_->Stuck();
}

bool ConsoleWriter::holds_unkept() const {
  std::lock_guard lock(state_->mu);
  return state_->unkept > 0 && !state_->broken;
}

size_t ConsoleWriter::queued_bytes() const {
  std::lock_guard lock(state_->mu);
  return state_->bytes;
}

int ConsoleWriter::write_error() const {
  std::lock_guard lock(state_->mu);
  return state_->error;
}

uint64_t ConsoleWriter::dropped_lines() const {
  std::lock_guard lock(state_->mu);
  return state_->dropped_total;
}

void ConsoleWriter::set_capacity(size_t bytes) {
  std::lock_guard lock(state_->mu);
  state_->capacity = bytes;
}

uint64_t ConsoleWriter::chunks_written() const {
  std::lock_guard lock(state_->mu);
  return state_->chunks_written;
}

namespace {

// At exit, output queued for a stream that took nothing for `idle_limit` is
// given up: said on the other stream, if that one reads.
void SayGivenUp(ConsoleWriter& out, ConsoleWriter& err, std::chrono::milliseconds idle_limit) {
  if (&out == &err) return;
  for (auto [name, stalled, other] :
       {std::tuple{"stdout", &out, &err}, std::tuple{"stderr", &err, &out}}) {
    if (stalled->queued_bytes() == 0 || other->queued_bytes() > 0) continue;
    other->WriteOwnLine("ddprun: its " + std::string(name) + " has taken nothing for " +
                        std::to_string(idle_limit.count() / 1000) + " s: the " +
                        std::to_string(stalled->queued_bytes()) +
                        " bytes of output queued for it are not shown" +
                        (stalled->holds_unkept() ? ", some of which no log file keeps\n"
                                                 : " (the log files keep them)\n"));
    other->Flush(idle_limit);
  }
}

}  // namespace

void FlushConsole(std::chrono::milliseconds idle_limit, bool wait_for_unkept) {
  ConsoleWriter& out = ConsoleWriter::For(STDOUT_FILENO);
  ConsoleWriter& err = ConsoleWriter::For(STDERR_FILENO);
  const bool shared = &out == &err;
  // Both at once: given up when neither took anything for `idle_limit`.
  constexpr std::chrono::milliseconds kSlice{50};
  auto progress = [&] { return out.chunks_written() + (shared ? 0 : err.chunks_written()); };
  uint64_t seen = progress();
  auto last = std::chrono::steady_clock::now();
  bool told = false;
  for (;;) {
    const bool out_done = out.Flush(kSlice);
    if ((shared || err.Flush(kSlice)) && out_done) return;
    const auto now = std::chrono::steady_clock::now();
    if (const uint64_t p = progress(); p != seen) {
      seen = p;
      last = now;
      continue;
    }
    if (now - last < idle_limit) continue;
    if (!wait_for_unkept || (!out.holds_unkept() && (shared || !err.holds_unkept()))) {
      SayGivenUp(out, err, idle_limit);
      return;
    }
    // What no log file keeps is never dropped: waited for, as a worker writing
    // to the console itself would wait, and said where it can be seen.
    if (!told) {
      told = true;
      for (auto [name, stalled, other] :
           {std::tuple{"stdout", &out, &err}, std::tuple{"stderr", &err, &out}}) {
        if (shared || !stalled->holds_unkept() || other->queued_bytes() > 0) continue;
        const std::string text =
            "ddprun: its " + std::string(name) + " has taken nothing for " +
            std::to_string(idle_limit.count() / 1000) + " s; " +
            std::to_string(stalled->queued_bytes()) +
            " bytes of output that no log file keeps wait for it (SIGINT or SIGTERM gives them "
            "up)\n";
        other->WriteOwnLine(text);
      }
    }
  }
}

std::vector<std::string> FailedConsoles() {
  ConsoleWriter& out = ConsoleWriter::For(STDOUT_FILENO);
  ConsoleWriter& err = ConsoleWriter::For(STDERR_FILENO);
  std::vector<std::string> failed;
  for (auto [name, w] : {std::pair{"stdout", &out}, {&out == &err ? "" : "stderr", &err}}) {
    const int e = w->write_error();
    if (*name != '\0' && e != 0 && e != EPIPE) {
      failed.push_back(std::string(name) + ": " + std::strerror(e));
    }
  }
  return failed;
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
