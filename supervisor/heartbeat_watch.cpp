#include "supervisor/heartbeat_watch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/unique_fd.hpp"

namespace ddprun::supervisor {

int64_t HeartbeatWatch::FileTime(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

namespace {

// Its directory is gone, or something else is in its place (attack 103: a file).
bool DirectoryGone(const std::string& file) {
  struct stat st {};
  const std::string dir = std::filesystem::path(file).parent_path().string();
  if (::stat(dir.c_str(), &st) != 0) return errno == ENOENT || errno == ENOTDIR;
  return !S_ISDIR(st.st_mode);
}

}  // namespace

void HeartbeatWatch::Restore(Progress& p, int rank, SteadyTime now) {
  const std::filesystem::path file(p.file);
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  UniqueFd fd(ec ? -1 : ::open(p.file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  const int error = ec ? ec.value() : fd.get() < 0 ? errno : 0;
  if (fd.get() >= 0) {
    // Not a beat: the time of the last one.
    const struct timespec times[2] = {{p.mtime_ns / 1000000000, p.mtime_ns % 1000000000},
                                      {p.mtime_ns / 1000000000, p.mtime_ns % 1000000000}};
    (void)::futimens(fd.get(), times);
  }
  const std::string dir = file.parent_path().string();
  // Not made again: the rank cannot beat, and its silence is not counted (as a file that
  // cannot be written) until it is; then it counts from now.
  const std::string cannot = error == 0 || p.output_is_progress ? "" : std::strerror(error);
  if (cannot.empty() && !p.cannot_beat.empty()) p.last = p.seen = now;
  p.cannot_beat = cannot;
  if (!restored_.insert(dir).second) return;
  if (error == 0) {
    spdlog::warn(
        "the directory of rank {}'s heartbeat file, {}, was removed while the job ran (a "
        "cleaner of /tmp? give --log_dir a directory it leaves alone): ddprun made it again, "
        "and the rank's hang detection goes on; what the run had written there is lost",
        rank, dir);
  } else {
    spdlog::warn(
        "the directory of rank {}'s heartbeat file, {}, was removed (or replaced) while the job "
        "ran, and ddprun could not make it again ({}): the rank cannot beat, so ddprun cannot "
        "tell a hang of it from its silence; that hang detection is off until the directory "
        "can be made again",
        rank, dir, std::strerror(error));
  }
}

void HeartbeatWatch::WatchWritable(Progress& p, int rank, SteadyTime now) {
  const std::string cannot =
      ::access(p.file.c_str(), W_OK) == 0 || errno == ENOENT ? "" : std::strerror(errno);
  if (cannot == p.cannot_beat) return;
  if (!cannot.empty()) {
    spdlog::warn(
        "rank {}'s heartbeat file {} cannot be written ({}): the rank cannot beat, so ddprun "
        "cannot tell a hang of it from its silence; that hang detection is off until the file "
        "can be written (make its directory writable again)",
        rank, p.file, cannot);
  } else {
    spdlog::info("rank {}'s heartbeat file can be written again: its hang detection is back", rank);
    p.last = p.seen = now;  // its silence counts from now
  }
  p.cannot_beat = cannot;
}

void HeartbeatWatch::Add(const std::string& file, SteadyTime now, int64_t file_time,
                         bool output_is_progress, const std::string& finished_file) {
  Progress p;
  p.output_is_progress = output_is_progress;
  p.finished_file = finished_file;
  p.last = p.seen = now;
  p.file = file;
  p.mtime_ns = file.empty() ? 0 : file_time;
  workers_.push_back(std::move(p));
}

void HeartbeatWatch::NoteProgress(size_t index, SteadyTime now) {
  if (index >= workers_.size() || workers_[index].finishing) return;
  workers_[index].last = workers_[index].seen = now;
  workers_[index].beaten = true;
}

void HeartbeatWatch::Look(SteadyTime now, int64_t wall_now_ns,
                          const std::vector<WorkerRecord>& workers) {
  for (size_t i = 0; i < workers_.size() && i < workers.size(); ++i) {
    Progress& p = workers_[i];
    const int64_t m = FileTime(p.file);
    if (m == 0 && p.mtime_ns > 0 && !p.finishing && DirectoryGone(p.file)) {
      Restore(p, workers[i].rank, now);
      continue;
    }
    if (m == 0 && p.mtime_ns > 0 && !p.finishing) {
      // ddprun created the file; the worker removed it: it is finishing (its
      // interpreter exiting, say), no beat is due any more, only its exit.
      p.finishing = true;
      p.last = p.seen = now;
      spdlog::debug("rank {} removed its heartbeat file: finishing, held to --exit_timeout",
                    workers[i].rank);
      continue;
    }
    if (m != 0 && !p.finishing && !p.output_is_progress) WatchWritable(p, workers[i].rank, now);
    if (m <= p.mtime_ns) continue;
    if (p.finishing) {
      // Created again (a new process group after a destroyed one): running again.
      p.finishing = false;
      spdlog::debug("rank {} created its heartbeat file again: held to --hang_timeout again",
                    workers[i].rank);
    }
    p.mtime_ns = m;
    p.beaten = p.touched = true;
    p.last = p.seen = now - std::chrono::nanoseconds(std::max<int64_t>(0, wall_now_ns - m));
  }
}

void HeartbeatWatch::Postpone(SteadyTime::duration by, SteadyTime now) {
  for (Progress& p : workers_) p.last = std::min(p.last + by, std::max(p.last, now));
}

std::optional<SteadyTime::duration> HeartbeatWatch::Finished(size_t index, SteadyTime now,
                                                             int64_t wall_now_ns) const {
  if (index >= workers_.size()) return std::nullopt;
  const Progress& p = workers_[index];
  const bool removed =
      p.finishing || (p.mtime_ns > 0 && FileTime(p.file) == 0 && !DirectoryGone(p.file));
  if (!removed) return std::nullopt;
  // A file untouched this long and gone was a cleaner's (systemd-tmpfiles ages /tmp by days);
  // one the worker touched between two looks is not seen touched: its age tells.
  constexpr int64_t kCleanerAgeNs = int64_t{24} * 3600 * 1000000000;
  const bool own_removal = p.touched || wall_now_ns - p.mtime_ns < kCleanerAgeNs;
  if (p.finished_file.empty() ? !own_removal : FileTime(p.finished_file) == 0) return std::nullopt;
  // Its directory changed as the file went (the files beside it are made at the start).
  const int64_t dir_time = FileTime(std::filesystem::path(p.file).parent_path().string());
  if (dir_time >= p.mtime_ns && dir_time <= wall_now_ns) {
    return std::chrono::duration_cast<SteadyTime::duration>(
        std::chrono::nanoseconds(wall_now_ns - dir_time));
  }
  return p.finishing ? now - p.seen : SteadyTime::duration::zero();
}

std::vector<Beat> HeartbeatWatch::Beats(const std::vector<WorkerRecord>& workers) const {
  std::vector<Beat> beats;
  for (size_t i = 0; i < workers_.size() && i < workers.size(); ++i) {
    const WorkerRecord& w = workers[i];
    const Progress& p = workers_[i];
    beats.push_back({w.state == WorkerState::kRunning, w.rank, w.local_rank, w.pid, p.last, p.seen,
                     p.beaten, p.finishing, p.cannot_beat});
  }
  return beats;
}

}  // namespace ddprun::supervisor
