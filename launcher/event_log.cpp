#include "launcher/event_log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/read_file.hpp"
#include "launcher/machine_reports.hpp"
#include "launcher/raw_options.hpp"
#include "supervisor/console.hpp"

namespace ddprun::launcher {

using json = nlohmann::ordered_json;

namespace {

// ddprun's stderr or stdout when `fd` is the same file (DDPRUN_EVENT_LOG=/dev/stderr,
// or the path of the file stderr goes to); else -1. Events then go through the
// console's writer of that stream: on a regular file, written through a second
// open, they landed at that open's own offset and ddprun's other lines wrote over
// them; on a pipe or terminal they came out of order with those lines, and a
// reader that stopped blocked the agent.
int StandardStreamOf(int fd) {
  struct stat log {};
  if (fstat(fd, &log) != 0) return -1;
  for (const int standard : {STDERR_FILENO, STDOUT_FILENO}) {
    struct stat st {};
    if (fstat(standard, &st) == 0 && st.st_dev == log.st_dev && st.st_ino == log.st_ino) {
      return standard;
    }
  }
  return -1;
}

}  // namespace

StatusOr<EventLog> EventLog::Open(const std::string& handler, const std::string& path) {
  EventLog log;
  // The handlers are the option table's words for --event_log_handler.
  if (auto word = ParseWord("event_log_handler", handler); !word.ok()) return word.status();
  // torchrun's dynamic_rendezvous handler is a null one too.
  if ((handler == "null" || handler == "dynamic_rendezvous") && path.empty()) return log;
  if (path.empty()) {
    log.fd_ = STDERR_FILENO;
    log.console_ = true;
    log.where_ = "stderr";
    return log;
  }
  auto fd = OpenForWriting(path, O_CREAT | O_APPEND);
  if (!fd.ok()) {
    return InvalidArgument("DDPRUN_EVENT_LOG=" + fd.status().message());
  }
  log.where_ = path;
  if (const int standard = StandardStreamOf(fd->get()); standard >= 0) {
    log.fd_ = standard;
    log.console_ = true;
    return log;
  }
  struct stat st {};
  if (fstat(fd->get(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // This open's own description: nobody else's writes turn non-blocking.
    const int flags = fcntl(fd->get(), F_GETFL);
    log.nonblocking_ = flags >= 0 && fcntl(fd->get(), F_SETFL, flags | O_NONBLOCK) == 0;
  }
  log.owned_ = std::move(*fd);
  log.fd_ = log.owned_.get();
  return log;
}

std::string EventLog::Line(const std::string& event, const json& fields) const {
  json j = {{"schema", kEventSchema}, {"time", UtcTimestamp()}, {"event", event}};
  j.update(common_);
  j.update(fields);
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void EventLog::Emit(const std::string& event, const json& fields) {
  if (fd_ < 0) return;
  const std::string line = Line(event, fields);
  if (console_) {
    supervisor::ConsoleWriter::For(fd_).WriteOwnLine(line);
    return;
  }
  if (nonblocking_) {
    Hold(line, event == "exit");
    return;
  }
  // One write: lines from several agents appending to one file stay whole.
  ssize_t n;
  do {
    n = write(fd_, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(line.size())) {
    Fail(n < 0 ? std::strerror(errno) : "short write");
  }
}

void EventLog::Hold(const std::string& line, bool last) {
  WriteHeld();
  if (fd_ < 0) return;
  if (dropped_ > 0 && (sent_ == held_.size() || last)) {
    // The reader took what was held (or this is the last event): say the gap where it is.
    if (sent_ == held_.size()) {
      spdlog::info("event log {}: its reader takes events again; {} were dropped meanwhile", where_,
                   dropped_);
    }
    held_ += Line("events_dropped", {{"count", dropped_}});
    dropped_ = 0;
  } else if (!last && (dropped_ > 0 || held_.size() - sent_ + line.size() > kEventBacklogBytes)) {
    if (dropped_++ == 0) {
      spdlog::warn(
          "event log {}: its reader has not taken the last {} bytes of events: later events are "
          "dropped (and counted in an events_dropped event) until it has read them, so that "
          "supervision goes on",
          where_, held_.size() - sent_);
    }
    return;
  }
  held_ += line;
  WriteHeld();
}

void EventLog::WriteHeld() {
  while (fd_ >= 0 && sent_ < held_.size()) {
    // A line at a time: on a pipe, a line of PIPE_BUF bytes or less is then taken whole or not
    // at all, so a reader that is left behind at the end never reads half a line.
    const size_t line_end = held_.find('\n', sent_);
    const size_t len = (line_end == std::string::npos ? held_.size() : line_end + 1) - sent_;
    const ssize_t n = write(fd_, held_.data() + sent_, len);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      Fail(n < 0 ? std::strerror(errno) : "no byte written");
    }
  }
  // What was written goes once it is half the buffer (erasing it line by line moved the
  // whole backlog for each line).
  if (sent_ == held_.size() || sent_ > held_.size() / 2) {
    held_.erase(0, sent_);
    sent_ = 0;
  }
}

void EventLog::Flush(std::chrono::milliseconds idle_limit, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  WriteHeld();
  while (fd_ >= 0 && sent_ < held_.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    const auto wait = std::min(idle_limit, left);
    pollfd p{fd_, POLLOUT, 0};
    const int ready = wait.count() > 0 ? poll(&p, 1, static_cast<int>(wait.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      spdlog::warn(
          "event log {}: its reader did not take the last {} bytes of events in time: "
          "they are not written",
          where_, held_.size() - sent_);
      return;
    }
    WriteHeld();
  }
}

void EventLog::Fail(const std::string& why) {
  spdlog::warn("event log {}: write failed ({}): no more events are written", where_, why);
  fd_ = -1;
  held_.clear();
  sent_ = 0;
}

}  // namespace ddprun::launcher
