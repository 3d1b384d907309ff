#include "env/log_layout.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/statvfs.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "base/unique_fd.hpp"

namespace ddprun::env {

namespace fs = std::filesystem;

namespace {

// Why `dir` cannot hold temporary files, or "" when it can.
std::string Unusable(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (access(dir.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  return "";
}

std::string Absolute(const std::string& tmpdir) {
  std::error_code ec;
  std::string root = fs::absolute(tmpdir, ec).lexically_normal().string();
  if (ec) return tmpdir;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

}  // namespace

std::string TempDirectory(const std::string& tmpdir) {
  if (tmpdir.empty()) return "/tmp";
  std::string root = Absolute(tmpdir);
  if (Unusable(root).empty()) return root;
  // As Python's tempfile.gettempdir: the first of these that takes a file.
  for (const char* fallback : {"/tmp", "/var/tmp", "/usr/tmp"}) {
    if (Unusable(fallback).empty()) return fallback;
  }
  return root;  // none: the error names TMPDIR's
}

std::optional<std::string> TempDirectoryProblem(const std::string& tmpdir) {
  if (tmpdir.empty()) return std::nullopt;
  const std::string why = Unusable(Absolute(tmpdir));
  if (why.empty()) return std::nullopt;
  const std::string used = TempDirectory(tmpdir);
  return "TMPDIR=" + tmpdir + " is no writable directory (" + why + "): " +
         (used == Absolute(tmpdir)
              ? std::string("nor is /tmp, /var/tmp or /usr/tmp")
              : "ddprun's temporary files (the logs without --log_dir, heartbeat and timer "
                "files) go under " +
                    used + ", as Python's tempfile falls back; the workers get TMPDIR as it is");
}

namespace {

// mkdtemp(pattern); on failure `*err` is its errno.
StatusOr<std::string> MakeTempDir(const std::string& pattern, int* err) {
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    *err = errno;
    return ErrnoStatus("create " + pattern, *err);
  }
  return std::string(buf.data());
}

std::string TempRoot() {
  const char* tmp = getenv("TMPDIR");
  return TempDirectory(tmp == nullptr ? "" : tmp);
}

// What to do about errno `err` from making something under `dir`; `option`
// is what names the directory ("--log_dir", "TMPDIR").
std::string Advice(int err, const std::string& dir, const std::string& option) {
  const std::string elsewhere = "point " + option + " at another filesystem";
  if (err == ENOSPC) {
    struct statvfs fs {};
    if (statvfs(dir.c_str(), &fs) == 0 && fs.f_files > 0 && fs.f_favail == 0) {
      return "its filesystem has no free inode left, however much space (df -i " + dir +
             "): remove files there, or " + elsewhere;
    }
    return "its filesystem is full (df -h " + dir + "): free space there, or " + elsewhere;
  }
  if (err == EDQUOT)
    return "your disk quota there is used up (quota -s): free some, or " + elsewhere;
  return "choose a writable directory";
}

// `status` (an errno one, from making `what` under `dir`) as the user's
// error: the option, the path and what to do.
Status DirError(const Status& status, int err, const std::string& dir, const std::string& option) {
  return Status(status.code(),
                option + " " + dir + ": " + status.message() + ": " + Advice(err, dir, option));
}

}  // namespace

StatusOr<LogLayout> LogLayout::Create(const std::string& log_dir, const std::string& run_id,
                                      const std::string& node) {
  LogLayout layout;
  if (log_dir == "/dev/null") {
    layout.disabled_ = true;
    return layout;
  }
  if (log_dir.empty()) {
    const char* tmpdir = getenv("TMPDIR");
    int err = 0;
    auto base = MakeTempDir(TempRoot() + "/ddprun_XXXXXX", &err);
    if (!base.ok()) {
      const bool from_env = tmpdir != nullptr && *tmpdir != '\0';
      const std::string advice =
          err == ENOSPC || err == EDQUOT
              ? Advice(err, TempRoot(), from_env ? "TMPDIR (or --log_dir)" : "--log_dir")
              : std::string("make ") + (from_env ? "TMPDIR" : "/tmp") +
                    " an existing writable directory, or give --log_dir";
      return Status(base.status().code(),
                    "the logs' temporary directory: " + base.status().message() + ": " + advice);
    }
    layout.base_ = *base;
    layout.temporary_ = true;
  } else {
    std::error_code ec;
    // A dangling symbolic link, or something else than a directory, makes
    // create_directories say only "File exists".
    if (fs::is_symlink(fs::symlink_status(log_dir, ec)) && !fs::exists(log_dir, ec)) {
      return PermissionDenied("--log_dir " + log_dir + " is a symbolic link to " +
                              fs::read_symlink(log_dir, ec).string() +
                              ", which does not exist: create that directory, or choose another "
                              "--log_dir");
    }
    fs::create_directories(log_dir, ec);
    std::error_code not_dir;
    if (ec && ec.value() == EEXIST && !fs::is_directory(log_dir, not_dir)) {
      return PermissionDenied("--log_dir " + log_dir +
                              " is not a directory (a file or a device is there, or in its path): "
                              "choose a directory");
    }
    if (ec) {
      return PermissionDenied("--log_dir " + log_dir + ": " + ec.message() + ": " +
                              Advice(ec.value(), log_dir, "--log_dir"));
    }
    layout.base_ = fs::absolute(log_dir, ec).string();
    if (ec) return PermissionDenied("--log_dir " + log_dir + ": " + ec.message());
  }
  std::string tag = node;
  for (char& ch : tag) {
    if (ch == '/' || ch == '\0') ch = '_';
  }
  int err = 0;
  auto run =
      MakeTempDir(layout.base_ + "/" + run_id + (tag.empty() ? "" : "_" + tag) + "_XXXXXX", &err);
  if (!run.ok()) {
    return DirError(run.status(), err, layout.base_,
                    layout.temporary_ ? "the logs' temporary directory" : "--log_dir");
  }
  layout.run_ = *run;
  return layout;
}

std::string LogLayout::AttemptDir(int attempt) const {
  return run_ + "/attempt_" + std::to_string(attempt);
}

Status LogLayout::PrepareAttempt(int attempt, int round, int local_world_size, std::string* lost) {
  if (disabled_) return Status::Ok();
  std::error_code ec;
  if (auto earlier = round_of_attempt_.find(attempt); earlier != round_of_attempt_.end() &&
                                                      earlier->second != round &&
                                                      fs::exists(AttemptDir(attempt), ec)) {
    const std::string kept = AttemptDir(attempt) + ".round_" + std::to_string(earlier->second);
    fs::rename(AttemptDir(attempt), kept, ec);
    if (ec && lost != nullptr) {
      *lost = "could not keep rendezvous round " + std::to_string(earlier->second) +
              "'s worker logs as " + kept + " (" + ec.message() + "): " + AttemptDir(attempt) +
              " is emptied for round " + std::to_string(round);
    }
  }
  round_of_attempt_[attempt] = round;
  fs::remove_all(AttemptDir(attempt), ec);  // what could not be kept
  for (int r = 0; r < local_world_size && !ec; ++r) {
    fs::create_directories(AttemptDir(attempt) + "/" + std::to_string(r), ec);
  }
  if (!ec) fs::create_directories(DumpDir(attempt), ec);
  const std::string option = temporary_ ? "the logs' temporary directory" : "--log_dir";
  if (ec) {
    return DirError(Internal("create " + AttemptDir(attempt) + ": " + ec.message()), ec.value(),
                    base_, option);
  }
  for (int r = 0; r < local_world_size; ++r) {
    const std::string path = HeartbeatPath(attempt, r);
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      const int err = errno;
      return DirError(ErrnoStatus("create " + path, err), err, base_, option);
    }
  }
  return Status::Ok();
}

std::string LogLayout::RankFile(int attempt, int local_rank, const std::string& name) const {
  return AttemptDir(attempt) + "/" + std::to_string(local_rank) + "/" + name;
}

std::string LogLayout::StdoutPath(int attempt, int local_rank) const {
  return disabled_ ? "/dev/null" : RankFile(attempt, local_rank, "stdout.log");
}

std::string LogLayout::StderrPath(int attempt, int local_rank) const {
  return disabled_ ? "/dev/null" : RankFile(attempt, local_rank, "stderr.log");
}

std::string LogLayout::ErrorFile(int attempt, int local_rank) const {
  return disabled_ ? "" : RankFile(attempt, local_rank, "error.json");
}

std::string LogLayout::HeartbeatPath(int attempt, int local_rank) const {
  return disabled_ ? "" : RankFile(attempt, local_rank, "heartbeat");
}

std::string LogLayout::TracePath(int attempt, int local_rank) const {
  return disabled_ ? "" : RankFile(attempt, local_rank, "trace.bin");
}

std::string LogLayout::DumpDir(int attempt) const {
  return disabled_ ? "" : AttemptDir(attempt) + "/dumps";
}

std::string LogLayout::FilteredPath(int attempt, const std::string& stream) const {
  return disabled_ ? "/dev/null" : AttemptDir(attempt) + "/filtered_" + stream + ".log";
}

}  // namespace ddprun::env
