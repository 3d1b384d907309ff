#include "launcher/event_log.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "base/read_file.hpp"
#include "base/unique_fd.hpp"
#include "launcher/machine_reports.hpp"
#include "launcher/raw_options.hpp"
#include "supervisor/console.hpp"

namespace ddprun::launcher {

using json = nlohmann::ordered_json;

// The events for a file, pipe or terminal of the log's own, and the thread
// that writes them: the agent only queues. Shared with the thread, which may
// be blocked in write(2) for good (a reader that never reads again) and then
// outlives the EventLog; it ends with the process.
struct EventLog::Writer {
  std::mutex mu;
  std::condition_variable work, idle;
  UniqueFd fd;
  std::string held;      // lines not written yet, the one being written first
  size_t in_flight = 0;  // bytes of held's first line the thread is writing
  uint64_t dropped = 0;  // events dropped since the reader last caught up
  uint64_t written = 0;  // lines written: the reader's progress
  std::string error;     // the failed write's, said once by the agent's thread
  bool failed = false, told = false, closing = false;

  void Run() {
    std::unique_lock lock(mu);
    for (;;) {
      work.wait(lock, [this] { return !held.empty() || closing || failed; });
      if (held.empty() || failed) return;
      // A line at a time: one write(2) each, so lines of several agents appending to one file
      // stay whole, and a pipe's reader left behind at the end never reads half a line.
      const size_t end = held.find('\n');
      in_flight = end == std::string::npos ? held.size() : end + 1;
      const std::string line = held.substr(0, in_flight);
      lock.unlock();
      size_t done = 0;
      int err = 0;
      while (done < line.size()) {
        const ssize_t n = write(fd.get(), line.data() + done, line.size() - done);
        if (n > 0) {
          done += static_cast<size_t>(n);
        } else if (n < 0 && errno == EINTR) {
          continue;
        } else {
          err = n < 0 ? errno : EIO;
          break;
        }
      }
      lock.lock();
      held.erase(0, in_flight);
      in_flight = 0;
      ++written;
      if (err != 0) {
        failed = true;
        error = std::strerror(err);
        held.clear();
      }
      idle.notify_all();
    }
  }
};

namespace {

// ddprun's stderr or stdout when `path` names the same file (/dev/stderr, or the path of the
// file stderr goes to); else -1. Events then go through the console's writer of that stream:
// on a regular file, written through a second open, they landed at that open's own offset and
// ddprun's other lines wrote over them; on a pipe or terminal they came out of order with
// those lines; a socket cannot be opened by its path at all.
int StandardStreamOf(const std::string& path) {
  struct stat log {};
  if (stat(path.c_str(), &log) != 0) return -1;
  for (const int standard : {STDERR_FILENO, STDOUT_FILENO}) {
    struct stat st {};
    if (fstat(standard, &st) == 0 && st.st_dev == log.st_dev && st.st_ino == log.st_ino) {
      return standard;
    }
  }
  return -1;
}

// Said once: at the event after the failed write, or at the end.
void SayWriteFailed(const std::string& where, const std::string& error) {
  spdlog::warn("event log {}: write failed ({}): no more events are written", where, error);
}

}  // namespace

EventLog::EventLog() = default;
EventLog::EventLog(EventLog&&) noexcept = default;
EventLog& EventLog::operator=(EventLog&&) noexcept = default;

EventLog::~EventLog() {
  if (!writer_) return;
  std::lock_guard lock(writer_->mu);
  writer_->closing = true;  // the thread ends once what is held is written
  writer_->work.notify_all();
}

StatusOr<EventLog> EventLog::Open(const std::string& handler, const std::string& path) {
  EventLog log;
  // The handlers are the option table's words for --event_log_handler.
  if (auto word = ParseWord("event_log_handler", handler); !word.ok()) return word.status();
  // torchrun's dynamic_rendezvous handler is a null one too.
  if ((handler == "null" || handler == "dynamic_rendezvous") && path.empty()) return log;
  if (path.empty()) {
    log.console_fd_ = STDERR_FILENO;
    log.where_ = "stderr";
    return log;
  }
  log.where_ = path;
  if (const int standard = StandardStreamOf(path); standard >= 0) {
    log.console_fd_ = standard;
    return log;
  }
  auto fd = OpenForWriting(path, O_CREAT | O_APPEND);
  if (!fd.ok()) {
    return InvalidArgument("DDPRUN_EVENT_LOG=" + fd.status().message());
  }
  auto writer = std::make_shared<Writer>();
  writer->fd = std::move(*fd);
  try {
    std::thread([writer] { writer->Run(); }).detach();
  } catch (const std::system_error& e) {
    return Unavailable("DDPRUN_EVENT_LOG=" + path +
                       ": cannot start its writer thread: " + e.what());
  }
  log.writer_ = std::move(writer);
  return log;
}

bool EventLog::enabled() const {
  if (console_fd_ >= 0) return true;
  if (!writer_) return false;
  std::lock_guard lock(writer_->mu);
  return !writer_->failed;
}

std::string EventLog::Line(const std::string& event, const json& fields) const {
  json j = {{"schema", kEventSchema}, {"time", UtcTimestamp()}, {"event", event}};
  j.update(common_);
  j.update(fields);
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void EventLog::Emit(const std::string& event, const json& fields) {
  if (console_fd_ >= 0) {
    supervisor::ConsoleWriter::For(console_fd_).WriteOwnLine(Line(event, fields));
    return;
  }
  if (!writer_) return;
  const std::string line = Line(event, fields);
  const bool last = event == "exit";
  Writer& w = *writer_;
  std::unique_lock lock(w.mu);
  if (w.failed) {
    if (!std::exchange(w.told, true)) {
      const std::string error = w.error;
      lock.unlock();
      SayWriteFailed(where_, error);
    }
    return;
  }
  if (w.dropped > 0 && (w.held.empty() || last)) {
    // The reader took what was held (or this is the last event): the gap is said where it is.
    const uint64_t dropped = std::exchange(w.dropped, 0);
    w.held += Line("events_dropped", {{"count", dropped}});
    if (!last) {
      lock.unlock();
      spdlog::info("event log {}: its reader takes events again; {} were dropped meanwhile", where_,
                   dropped);
      lock.lock();
    }
  } else if (!last && (w.dropped > 0 || w.held.size() + line.size() > kEventBacklogBytes)) {
    if (w.dropped++ == 0) {
      const size_t held = w.held.size();
      lock.unlock();
      spdlog::warn(
          "event log {}: its reader has not taken the last {} bytes of events: later events are "
          "dropped (and counted in an events_dropped event) until it has read them, so that "
          "supervision goes on",
          where_, held);
    }
    return;
  }
  w.held += line;
  w.work.notify_one();
}

void EventLog::Flush(std::chrono::milliseconds idle_limit, std::chrono::milliseconds limit) {
  if (!writer_) return;  // the console's writer is flushed at exit
  Writer& w = *writer_;
  const auto end = std::chrono::steady_clock::now() + limit;
  std::unique_lock lock(w.mu);
  while (!w.held.empty() && !w.failed) {
    const uint64_t seen = w.written;
    const auto wait = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   end - std::chrono::steady_clock::now()),
                               idle_limit);
    const bool moved = wait.count() > 0 && w.idle.wait_for(lock, wait, [&w, seen] {
      return w.held.empty() || w.failed || w.written != seen;
    });
    if (!moved) {
      const size_t left = w.held.size();
      lock.unlock();
      spdlog::warn(
          "event log {}: its reader did not take the last {} bytes of events in time: they are "
          "not written",
          where_, left);
      return;
    }
  }
  // A write that failed with the last events is said here, as at the next event.
  if (w.failed && !std::exchange(w.told, true)) {
    const std::string error = w.error;
    lock.unlock();
    SayWriteFailed(where_, error);
  }
}

size_t EventLog::held_bytes() const {
  if (!writer_) return 0;
  std::lock_guard lock(writer_->mu);
  return writer_->held.size();
}

uint64_t EventLog::dropped() const {
  if (!writer_) return 0;
  std::lock_guard lock(writer_->mu);
  return writer_->dropped;
}

}  // namespace ddprun::launcher
