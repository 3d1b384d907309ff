#include "launcher/doctor_job.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <system_error>

#include "base/format.hpp"
#include "env/binding.hpp"
#include "env/log_layout.hpp"
#include "launcher/cpu_binding.hpp"
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
  // Not there yet: made as the launch would make it (a parent's permission
  // bits do not tell: /proc refuses root too; attack 88), and removed again
  // from the first directory made.
  // Only what is known not to exist (not a path that cannot be looked at) is
  // made, and so removed: nothing of someone else's is ever removed.
  auto absent = [&ec](const fs::path& p) {
    return fs::symlink_status(p, ec).type() == fs::file_type::not_found;
  };
  fs::path made;
  if (!log_dir.empty() && absent(log_dir)) {
    made = fs::absolute(log_dir, ec);
    while (made.has_parent_path() && made.parent_path() != made && absent(made.parent_path())) {
      made = made.parent_path();
    }
    fs::create_directories(log_dir, ec);
    if (ec) {
      const std::string why = ec.message();
      fs::remove_all(made, ec);
      return {kLogs, CheckStatus::kFail, "--log_dir " + log_dir + " cannot be made: " + why,
              "choose a --log_dir in a writable directory"};
    }
  }
  struct Unmake {
    const fs::path& path;
    Unmake(const Unmake&) = delete;
    Unmake& operator=(const Unmake&) = delete;
    ~Unmake() {
      std::error_code ignored;
      if (!path.empty()) fs::remove_all(path, ignored);
    }
  } unmake{made};
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
  if (!made.empty()) {
    return WithSpace(base, "--log_dir " + log_dir + " can be made (tried, and removed)");
  }
  return WithSpace(
      base, (log_dir.empty() ? "a temporary directory in " : "--log_dir ") + base + " is writable");
}

LimitCheck OptionsCheck(const std::vector<std::string>& warnings,
                        const std::vector<std::string>& said_elsewhere) {
  std::string said;  // each warning names its option
  for (const auto& warning : warnings) {
    if (std::find(said_elsewhere.begin(), said_elsewhere.end(), warning) != said_elsewhere.end()) {
      continue;
    }
    said += (said.empty() ? "" : "; ") + warning;
  }
  if (said.empty()) return LimitCheck{"options", CheckStatus::kOk, "nothing to warn of", ""};
  return LimitCheck{"options", CheckStatus::kWarn, said, ""};
}

std::optional<env::LimitCheck> BindingCheck(const LaunchConfig& c) {
  if (c.binding == env::BindMode::kNone) return std::nullopt;
  const std::string name = "CPU binding";
  auto plan = PlanWorkerCpus(c, c.gpu_bus_ids);
  if (!plan.ok())
    return env::LimitCheck{name, env::CheckStatus::kFail, plan.status().message(), ""};
  const std::string planned = env::DescribePlan(*plan);
  if (plan->warnings.empty()) {
    return env::LimitCheck{name, env::CheckStatus::kOk,
                           env::BindModeName(c.binding) + ": " + planned, ""};
  }
  std::string said;  // each warning names the option
  for (const auto& warning : plan->warnings) said += (said.empty() ? "" : "; ") + warning;
  return env::LimitCheck{name, env::CheckStatus::kWarn, said + " (" + planned + ")", ""};
}

}  // namespace ddprun::launcher
