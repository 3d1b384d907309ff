#include "launcher/doctor_job.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <system_error>

#include "base/format.hpp"
#include "env/log_layout.hpp"
#include "launcher/program.hpp"

namespace ddprun::launcher {

namespace fs = std::filesystem;
using env::CheckStatus;
using env::LimitCheck;

namespace {

constexpr char kLogs[] = "log directory";
// Less free space than this where the logs go is worth a warning: a few
// chatty workers fill it within a run.
constexpr uint64_t kLowSpace = uint64_t{256} << 20;

// `dir`'s filesystem's space left for this user, as "<n> free"; warns when low.
LimitCheck WithSpace(const std::string& dir, const std::string& measured) {
  struct statvfs fs_info {};
  if (statvfs(dir.c_str(), &fs_info) != 0) return {kLogs, CheckStatus::kOk, measured, ""};
  const uint64_t free = uint64_t{fs_info.f_bavail} * fs_info.f_frsize;
  const std::string said = measured + "; " + FormatBytes(free) + " free there";
  if (free >= kLowSpace) return {kLogs, CheckStatus::kOk, said, ""};
  return {kLogs, CheckStatus::kWarn, said,
          "free space there (df -h " + dir + "), or give --log_dir on another filesystem"};
}

}  // namespace

LimitCheck ProgramCheck(const LaunchConfig& c, const env::Environ& environ) {
  if (Status s = CheckWorkingDirectory(environ); !s.ok()) {
    return {"program", CheckStatus::kFail, s.message(), "cd into a directory that exists"};
  }
  auto program = ResolveProgram(c, environ);
  if (!program.ok()) {
    return {"program", CheckStatus::kFail,
            "cannot run " + c.program + ": " + program.status().message(),
            "give a program that exists on this node (a path, or a name on PATH)"};
  }
  std::string runs;
  for (const auto& word : program->argv) runs += (runs.empty() ? "" : " ") + word;
  if (!program->interpreter.empty()) runs += " (python from " + program->interpreter_source + ")";
  return {"program", CheckStatus::kOk, "each worker runs " + runs, ""};
}

LimitCheck LogDirectoryCheck(const std::string& log_dir) {
  if (log_dir == "/dev/null") {
    return {kLogs, CheckStatus::kOk, "--log_dir /dev/null: no worker log or error file is kept",
            ""};
  }
  std::error_code ec;
  if (!log_dir.empty() && !fs::exists(fs::symlink_status(log_dir, ec))) {
    // Not there yet: the launch makes it, in its nearest existing parent.
    fs::path parent = fs::absolute(log_dir, ec).parent_path();
    while (!parent.empty() && parent != parent.root_path() && !fs::exists(parent, ec)) {
      parent = parent.parent_path();
    }
    const std::string where = parent.empty() ? "/" : parent.string();
    if (!fs::is_directory(where, ec)) {
      return {kLogs, CheckStatus::kFail,
              "--log_dir " + log_dir + ": " + where + " is not a directory",
              "choose a --log_dir under a directory"};
    }
    if (access(where.c_str(), W_OK | X_OK) != 0) {
      return {kLogs, CheckStatus::kFail,
              "--log_dir " + log_dir + " cannot be made: " + where + " is not writable",
              "choose a writable directory"};
    }
    return WithSpace(where, "--log_dir " + log_dir + " is made at the launch, in " + where);
  }
  // There (or a temporary one): made as the launch makes its run directory.
  auto layout = env::LogLayout::Create(log_dir, "doctor");
  if (!layout.ok()) {
    return {kLogs, CheckStatus::kFail, layout.status().message(),
            log_dir.empty() ? "give --log_dir a writable directory" : "choose another --log_dir"};
  }
  fs::remove_all(layout->base_is_temporary() ? layout->base_dir() : layout->run_dir(), ec);
  const std::string base = layout->base_is_temporary()
                               ? fs::path(layout->base_dir()).parent_path().string()
                               : layout->base_dir();
  return WithSpace(
      base, (log_dir.empty() ? "a temporary directory in " : "--log_dir ") + base + " is writable");
}

}  // namespace ddprun::launcher
