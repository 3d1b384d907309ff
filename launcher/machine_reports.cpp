#include "launcher/machine_reports.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "base/read_file.hpp"
#include "supervisor/exit_status.hpp"

namespace ddprun::launcher {
namespace {

using json = nlohmann::ordered_json;

const char* StateName(supervisor::WorkerState s) {
  switch (s) {
    case supervisor::WorkerState::kRunning:
      return "running";
    case supervisor::WorkerState::kSucceeded:
      return "succeeded";
    case supervisor::WorkerState::kFailed:
      return "failed";
    case supervisor::WorkerState::kStopped:
      return "stopped";
    case supervisor::WorkerState::kAbandoned:
      return "abandoned";
  }
  return "unknown";
}

// {"exit_code": N or null, "signal": "SIGKILL" or null}: how a process ended.
json ExitJson(const supervisor::ExitStatus& e) {
  return {{"exit_code", e.signal != 0 ? json(nullptr) : json(e.code)},
          {"signal", e.signal != 0 ? json(supervisor::SignalName(e.signal)) : json(nullptr)}};
}

json WorkerJson(const supervisor::WorkerRecord& w) {
  json j = {{"rank", w.rank},
            {"local_rank", w.local_rank},
            {"pid", w.pid},
            {"state", StateName(w.state)}};
  j.update(ExitJson(w.exit));
  j["hung"] = !w.hang.empty();
  if (!w.start_error.empty()) j["start_error"] = w.start_error;
  if (!w.timer.empty()) j["timer"] = w.timer;
  return j;
}

// The worker's error file as written (torchrun's JSON), or null.
json ErrorFileJson(const std::string& path) {
  if (path.empty() || path == "<N/A>") return nullptr;
  // Never waits (a named pipe); a record that does not parse is null (the
  // failure's message says what it holds).
  const std::string text = ReadSmallFile(path);
  if (supervisor::NestsTooDeep(text)) return nullptr;
  json data = json::parse(supervisor::StrictJson(text), nullptr,
                          /*allow_exceptions=*/false);
  return data.is_discarded() ? json(nullptr) : data;
}

json FailureJson(const supervisor::FailureRecord& f) {
  json j = {{"rank", f.rank},
            {"local_rank", f.local_rank},
            {"pid", f.pid},
            {"time", f.timestamp},
            {"message", f.message},
            {"hung", f.hung},
            {"output_tail", f.output_tail}};
  j.update(ExitJson(f.exit));
  j["error_file"] = f.error_file == "<N/A>" ? json(nullptr) : json(f.error_file);
  j["error_file_contents"] = ErrorFileJson(f.error_file);
  j["core_dump"] = f.core.empty() ? json(nullptr) : json(f.core);
  return j;
}

json RanksJson(const std::vector<int>& ranks) { return json(ranks); }

}  // namespace

std::string UtcTimestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const long micros = static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof out, "%s.%06ldZ", buf, micros);
  return out;
}

const char* ExitClassName(ExitClass c) {
  switch (c) {
    case ExitClass::kSucceeded:
      return "succeeded";
    case ExitClass::kWorkerFailure:
      return "worker_failure";
    case ExitClass::kHang:
      return "hang";
    case ExitClass::kUsageError:
      return "usage_error";
    case ExitClass::kSignalled:
      return "signalled";
    case ExitClass::kPreempted:
      return "preempted";
    case ExitClass::kRendezvous:
      return "rendezvous";
    case ExitClass::kLauncherError:
      return "launcher_error";
  }
  return "unknown";
}

json IncidentJson(const IncidentFacts& f) {
  json j = {{"schema", kIncidentSchema},
            {"time", UtcTimestamp()},
            {"run_id", f.run_id},
            {"program", f.program},
            {"attempt", f.attempt},
            {"max_restarts", f.max_restarts},
            {"node", {{"host", f.host}, {"node_rank", f.node_rank}}},
            {"log_dir", f.log_dir},
            {"exit_code", f.exit_code},
            {"class", ExitClassName(f.exit_class)},
            {"message", f.message}};
  j["signal"] = f.signal != 0 ? json(supervisor::SignalName(f.signal)) : json(nullptr);
  if (f.root_cause) {
    const rendezvous::Cause& c = *f.root_cause;
    json root = {{"class", rendezvous::FailureClassName(c.cls)},
                 {"exit_code", c.exit_code},
                 {"node_rank", c.node_rank},
                 {"node", c.node},
                 {"rank", c.rank >= 0 ? json(c.rank) : json(nullptr)},
                 {"local_rank", c.local_rank >= 0 ? json(c.local_rank) : json(nullptr)},
                 {"pid", c.pid},
                 {"what", c.Describe()}};
    const bool here = !f.failures.empty() && f.failures.front().pid == c.pid && c.pid != 0;
    root["on_this_node"] = here;
    if (here) root["failure"] = FailureJson(f.failures.front());
    j["root_cause"] = root;
  } else {
    j["root_cause"] = nullptr;
  }
  j["failures"] = json::array();
  for (const auto& failure : f.failures) j["failures"].push_back(FailureJson(failure));
  j["workers"] = json::array();
  for (const auto& w : f.workers) j["workers"].push_back(WorkerJson(w));
  if (f.hang) {
    j["hang"] = {{"hung_ranks", RanksJson(f.hang->hung)},
                 {"stragglers", RanksJson(f.hang->stragglers)},
                 {"verdict", f.hang->verdict},
                 {"dump_dir", f.hang->dump_dir.empty() ? json(nullptr) : json(f.hang->dump_dir)},
                 {"summary", f.hang->dump_dir.empty() ? json(nullptr)
                                                      : json(f.hang->dump_dir + "/summary.txt")}};
  } else {
    j["hang"] = nullptr;
  }
  j["hints"] = json::array();
  if (!f.cause.empty()) j["hints"].push_back({{"cause", f.cause}, {"fix", f.fix}});
  j["slurm"] = f.slurm ? *f.slurm : json(nullptr);
  return j;
}

std::string JsonText(const json& doc) {
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Status WriteJsonFile(const std::string& path, const json& doc) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << JsonText(doc);
    out.close();
    if (!out) {
      const int err = errno;
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);  // a half-written file is no report
      return Internal("write " + tmp + ": " + std::strerror(err));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return Internal("rename " + tmp + " to " + path + ": " + ec.message());
  }
  return Status::Ok();
}

json DoctorJson(const std::string& host, int nproc_per_node, int threads_per_worker,
                const std::vector<env::LimitCheck>& checks, bool failed) {
  json j = {{"schema", kDoctorSchema},
            {"time", UtcTimestamp()},
            {"host", host},
            {"nproc_per_node", nproc_per_node},
            {"threads_per_worker", threads_per_worker},
            {"failed", failed},
            {"checks", json::array()}};
  for (const auto& c : checks) {
    j["checks"].push_back({{"check", c.check},
                           {"status", env::CheckStatusName(c.status)},
                           {"measured", c.measured},
                           {"fix", c.fix.empty() ? json(nullptr) : json(c.fix)}});
  }
  return j;
}

json DoctorUsageErrorJson(const std::string& host, const std::string& message) {
  return {{"schema", kDoctorSchema}, {"time", UtcTimestamp()}, {"host", host},
          {"failed", true},          {"usage_error", message}, {"checks", json::array()}};
}

}  // namespace ddprun::launcher
