#include "supervisor/heartbeat_watch.hpp"

#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ddprun::supervisor {

int64_t HeartbeatWatch::FileTime(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

void HeartbeatWatch::Add(const std::string& file, SteadyTime now, int64_t file_time) {
  Progress p;
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
    if (m == 0 && p.mtime_ns > 0 && !p.finishing) {
      // ddprun created the file; the worker removed it: it is finishing (its
      // interpreter exiting, say), no beat is due any more, only its exit.
      p.finishing = true;
      p.last = p.seen = now;
      spdlog::debug("rank {} removed its heartbeat file: finishing, held to --exit_timeout",
                    workers[i].rank);
      continue;
    }
    if (m <= p.mtime_ns) continue;
    if (p.finishing) {
      // Created again (a new process group after a destroyed one): running again.
      p.finishing = false;
      spdlog::debug("rank {} created its heartbeat file again: held to --hang_timeout again",
                    workers[i].rank);
    }
    p.mtime_ns = m;
    p.beaten = true;
    p.last = p.seen = now - std::chrono::nanoseconds(std::max<int64_t>(0, wall_now_ns - m));
  }
}

void HeartbeatWatch::Postpone(SteadyTime::duration by, SteadyTime now) {
  for (Progress& p : workers_) p.last = std::min(p.last + by, std::max(p.last, now));
}

std::vector<Beat> HeartbeatWatch::Beats(const std::vector<WorkerRecord>& workers) const {
  std::vector<Beat> beats;
  for (size_t i = 0; i < workers_.size() && i < workers.size(); ++i) {
    const WorkerRecord& w = workers[i];
    const Progress& p = workers_[i];
    beats.push_back({w.state == WorkerState::kRunning, w.rank, w.local_rank, w.pid, p.last, p.seen,
                     p.beaten, p.finishing});
  }
  return beats;
}

}  // namespace ddprun::supervisor
