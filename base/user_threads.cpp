#include "base/user_threads.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

namespace ddprun {
namespace {

struct StatusFields {
  std::optional<uint32_t> real_uid;
  uint64_t threads = 0;
  std::string name;
};

std::optional<StatusFields> ReadProcStatus(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  StatusFields f;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "Name:") std::getline(fields >> std::ws, f.name);
    if (key == "Uid:") {
      uint32_t uid = 0;
      if (fields >> uid) f.real_uid = uid;
    }
    if (key == "Threads:") fields >> f.threads;
  }
  if (!f.real_uid) return std::nullopt;
  return f;
}

// The command line with NULs as spaces, cut to 80 characters; `name` (the
// kernel's comm) for kernel threads and zombies, which have none.
std::string CommandOf(const std::string& dir, const std::string& name) {
  // Through istream::read, which turns a failed read (ESRCH: the process
  // exited meanwhile) into a stream state; an istreambuf_iterator would
  // let libstdc++'s ios_base::failure escape.
  std::ifstream in(dir + "/cmdline", std::ios::binary);
  char buf[256];
  in.read(buf, sizeof(buf));
  std::string cmd(buf, static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
  if (cmd.empty()) return name;
  return cmd.size() > 80 ? cmd.substr(0, 77) + "..." : cmd;
}

bool IsPid(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

std::vector<ProcessThreads> UserProcesses(uint32_t uid, const std::string& proc_root) {
  std::vector<ProcessThreads> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(proc_root, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string pid = it->path().filename().string();
    if (!IsPid(pid)) continue;
    const std::string dir = it->path().string();
    auto status = ReadProcStatus(dir + "/status");
    if (!status || *status->real_uid != uid) continue;
    out.push_back({std::stoi(pid), status->threads, CommandOf(dir, status->name)});
  }
  return out;
}

std::vector<ProcessThreads> TopThreadHolders(std::vector<ProcessThreads> processes, size_t n) {
  std::sort(processes.begin(), processes.end(), [](const auto& a, const auto& b) {
    return a.threads != b.threads ? a.threads > b.threads : a.pid < b.pid;
  });
  if (processes.size() > n) processes.resize(n);
  return processes;
}

}  // namespace ddprun
