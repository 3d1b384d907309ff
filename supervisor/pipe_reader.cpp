#include "supervisor/pipe_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ddprun::supervisor {

namespace {

constexpr size_t kReadBufferSize = 64 * 1024;

}  // namespace

// Where a worker's stream goes: straight on (the console, its file,
// /dev/null), or through a pipe that ddprun reads.
StatusOr<int> Supervisor::FilterFd(const std::string& path) {
  auto it = filter_files_.find(path);
  if (it == filter_files_.end()) {
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!fd.valid()) return ErrnoStatus("open the filter file " + path, errno);
    it = filter_files_.emplace(path, std::move(fd)).first;
  }
  return it->second.get();
}

std::optional<StreamSpec> Supervisor::OneStream(const StreamSpec& out, const StreamSpec& err) {
  if (!out.NeedsPipe() && !err.NeedsPipe()) return std::nullopt;  // each goes straight on
  const bool shown_alike = out.console && err.console && out.prefix == err.prefix;
  const bool console_only = out.file.empty() && err.file.empty() && out.duplicate_filters.empty() &&
                            err.duplicate_filters.empty();
  if (!shown_alike || !console_only || !stdout_is_stderr_) return std::nullopt;
  StreamSpec one = out;
  one.keep_tail = out.keep_tail || err.keep_tail;
  one.track_progress = out.track_progress || err.track_progress;
  return one;
}

StatusOr<int> Supervisor::ChildFd(const StreamSpec& stream, int console_fd,
                                  std::vector<UniqueFd>& parent_side) {
  if (!stream.NeedsPipe()) {
    if (!stream.file.empty()) {
      UniqueFd fd(open(stream.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!fd.valid()) return ErrnoStatus("open " + stream.file, errno);
      int raw = fd.get();
      parent_side.push_back(std::move(fd));
      return raw;
    }
    return stream.console ? console_fd : dev_null_out_.get();
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  UniqueFd read_end(fds[0]);
  parent_side.emplace_back(fds[1]);
  ConsoleWriter* console = &ConsoleWriter::For(console_fd);
  ConsoleTurn& turn = turns_[console];
  turn.launcher_breaks = &console->own_line_breaks();
  auto reader = std::make_unique<PipeReader>(this, outputs_.size(),  // the worker being started
                                             stream, console, &turn);
  if (!stream.file.empty()) {
    reader->file =
        UniqueFd(open(stream.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!reader->file.valid()) return ErrnoStatus("open " + stream.file, errno);
    struct stat st {};
    reader->keeps = fstat(reader->file.get(), &st) == 0 && S_ISREG(st.st_mode);
  }
  if (!stream.duplicate_filters.empty()) {
    auto filter = FilterFd(stream.filter_file);
    if (!filter.ok()) return filter.status();
    reader->filter_fd = *filter;
  }
  PipeReader* r = reader.get();
  Status read = r->pipe.Open(
      &loop_, read_end.Release(), kReadBufferSize, [r](std::string_view d) { r->Consume(d); },
      [r](int) { r->owner->CloseReader(*r); });
  // Kept also when it failed: its handle is closing, and Drain() runs the loop
  // until it has closed (running the loop here would run other callbacks in
  // the middle of a worker's start).
  readers_.push_back(std::move(reader));
  if (!read.ok()) return read;
  return parent_side.back().get();
}

void Supervisor::CloseReader(PipeReader& r) {
  if (!r.pipe.reading()) return;
  r.Finish();
  r.pipe.Close();
}

void Supervisor::NoteLine(size_t worker, std::string_view line) {
  // What a failure report needs: the last few KiB, cut at a line start.
  constexpr size_t kKeep = 4096;
  if (worker >= outputs_.size()) return;
  std::string& tail = outputs_[worker].tail;
  tail.append(line.substr(line.size() > kKeep ? line.size() - kKeep : 0));
  if (tail.size() <= 2 * kKeep) return;
  size_t cut = tail.find('\n', tail.size() - kKeep);
  tail.erase(0, cut == std::string::npos ? tail.size() - kKeep : cut + 1);
}

void Supervisor::NoteLogLost(size_t worker, const std::string& path, int err, const char* instead) {
  if (worker >= outputs_.size() || !lost_log_paths_.insert(path).second) return;
  outputs_[worker].lost_logs.push_back(path + ": write failed: " + std::strerror(err) +
                                       "; later output is not in it");
  spdlog::error("log file {} is incomplete: write failed: {}{}; {}", path, std::strerror(err),
                err == EFBIG ? " (the file size limit, ulimit -f)" : "", instead);
}

void Supervisor::PipeReader::Line(std::string_view line) {
  owner->NoteLine(worker, line);
  if (spec.console) shown.Line(line, out);
  if (filter_fd < 0) return;
  std::string copy;
  filter.Take(line, copy);
  if (!copy.empty() && !WriteAll(filter_fd, copy.data(), copy.size())) {
    owner->NoteLogLost(worker, spec.filter_file, errno,
                       "its later matching lines are not copied there");
    filter_fd = -1;
  }
}

void Supervisor::PipeReader::Consume(std::string_view data) {
  const auto now = std::chrono::steady_clock::now();
  if (spec.track_progress) owner->heartbeats_.NoteProgress(worker, now);
  // The log file is the complete record: written synchronously (a regular
  // file does not block on a reader); after a failed write it is given up,
  // and a stream it alone kept is shown on the console from then on, with
  // the rank's prefix, rather than lost.
  size_t written = 0;
  if (file.valid() && !WriteAll(file.get(), data.data(), data.size(), &written)) {
    const int err = errno;
    const bool was_shown = spec.console;
    if (!was_shown) {
      // The lines the file holds whole are not shown again (attack 90).
      const size_t end = data.substr(0, written).rfind('\n');
      const size_t kept = end == std::string_view::npos ? 0 : end + 1;
      splitter.Feed(data.substr(0, kept), [this](std::string_view l) { Line(l); });
      data.remove_prefix(kept);
      spec.console = true;
      shown.SetPrefix(spec.fallback_prefix);
    }
    owner->NoteLogLost(worker, spec.file, err,
                       was_shown ? "its later output is only on the console"
                                 : "its later output is shown on the console instead");
    file.Reset();
    // Kept nowhere else now: the console holds the worker back rather than
    // drop its lines (they were dropped, and the notice named this file).
    keeps = false;
  }
  splitter.Feed(data, [this](std::string_view l) { Line(l); });
  Flush();
  if (!spec.console || !shown.Unshown(splitter.pending())) {
    unshown_since = std::chrono::steady_clock::time_point::max();
  } else if (unshown_since == std::chrono::steady_clock::time_point::max()) {
    unshown_since = now;
    owner->ArmPartialLines();
  }
}

void Supervisor::PipeReader::Finish() {
  splitter.Finish([this](std::string_view l) { Line(l); });
  Flush();
  unshown_since = std::chrono::steady_clock::time_point::max();
}

std::chrono::steady_clock::time_point Supervisor::PipeReader::ShowWaiting(
    std::chrono::steady_clock::time_point before) {
  if (unshown_since == std::chrono::steady_clock::time_point::max() || unshown_since > before) {
    return unshown_since;  // nothing waiting, or not long enough yet
  }
  shown.Partial(splitter.pending(), out);
  Flush();
  unshown_since = std::chrono::steady_clock::time_point::max();
  return unshown_since;
}

void Supervisor::PipeReader::Flush() {
  if (out.empty()) return;
  // Never blocks: an unread console drops lines a log file keeps, counted.
  // Lines kept nowhere else are never dropped, nor any on a console that is a
  // regular file: until it has room again, the worker waits to write, as it
  // would writing to the console itself.
  const bool room = keeps ? console->Write(out, spec.file) : console->WriteOrHold(out);
  if (!room && !draining && !pipe.paused()) {
    pipe.Pause();
    held_since = std::chrono::steady_clock::now();
  }
  out.clear();
}

void Supervisor::WatchConsoleRoom() {
  uv_async_init(&loop_, &console_room_, [](uv_async_t* a) {
    for (auto& r : static_cast<Supervisor*>(a->data)->readers_) r->Resume();
  });
  console_room_.data = this;
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    ConsoleWriter::For(fd).SetRoomNotifier([a = &console_room_] { uv_async_send(a); });
  }
}

void Supervisor::UnwatchConsoleRoom() {
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) ConsoleWriter::For(fd).SetRoomNotifier(nullptr);
}

}  // namespace ddprun::supervisor
