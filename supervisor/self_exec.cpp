#include "supervisor/self_exec.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/read_file.hpp"
#include "supervisor/containment.hpp"

namespace ddprun::supervisor {

namespace {

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

std::string MappedFile(std::string_view maps, uintptr_t address) {
  // "start-end perms offset dev inode path", one mapping per line.
  while (!maps.empty()) {
    const size_t nl = maps.find('\n');
    const std::string line(maps.substr(0, nl));
    maps.remove_prefix(nl == std::string_view::npos ? maps.size() : nl + 1);
    unsigned long long start = 0, end = 0;
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %*s %*s %*s %*s %n", &start, &end, &path_at) < 2 ||
        path_at == 0) {
      continue;
    }
    if (address < start || address >= end) continue;
    const std::string path = line.substr(static_cast<size_t>(path_at));
    return path.empty() || path[0] != '/' ? "" : path;
  }
  return "";
}

LoaderArgs LoaderOptions(std::string_view cmdline, int program_args) {
  std::vector<std::string> args;
  for (size_t at = 0; at < cmdline.size();) {
    const size_t end = std::min(cmdline.find('\0', at), cmdline.size());
    args.emplace_back(cmdline.substr(at, end - at));
    at = end + 1;
  }
  LoaderArgs out;
  if (program_args <= 0 || args.size() <= static_cast<size_t>(program_args)) return out;
  const size_t program = args.size() - static_cast<size_t>(program_args);
  out.found = true;
  out.options.assign(args.begin() + 1, args.begin() + static_cast<long>(program));
  out.program = args[program];
  return out;
}

namespace {
int argument_count = 0;  // RememberArgumentCount
}  // namespace

void RememberArgumentCount(int argc) { argument_count = argc; }

SelfExec FindSelfExec() {
  SelfExec self;
  const std::string program =
      MappedFile(ReadSmallFile("/proc/self/maps"), reinterpret_cast<uintptr_t>(&RunGuardian));
  struct stat exe {};
  struct stat code {};
  if (program.empty() || stat("/proc/self/exe", &exe) != 0 || stat(program.c_str(), &code) != 0 ||
      SameFile(exe, code)) {
    return self;  // the program itself (or, replaced since it started, all there is)
  }
  // Run through the loader: its options come before the program's path.
  // (Counted from the end: an option's value may name the program too.)
  LoaderArgs loader = LoaderOptions(ReadSmallFile("/proc/self/cmdline"), argument_count);
  struct stat named {};
  if (!loader.found || stat(loader.program.c_str(), &named) != 0 || !SameFile(named, code)) {
    return self;  // not as expected: the guardian fails to start, and ddprun says so
  }
  self.before = std::move(loader.options);
  self.before.push_back(program);
  return self;
}

bool RewriteCommandLine(const std::vector<std::string>& args) {
  // Fields 48 and 49 of /proc/self/stat (after the name in parentheses,
  // which may hold blanks): where the command line lies in our memory.
  const std::string stat = ReadSmallFile("/proc/self/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  unsigned long long arg_start = 0, arg_end = 0;
  for (int n = 3; fields >> field; ++n) {
    if (n == 48) arg_start = std::stoull(field);
    if (n == 49) {
      arg_end = std::stoull(field);
      break;
    }
  }
  std::string text;
  for (const auto& a : args) text.append(a).push_back('\0');
  if (arg_start == 0 || arg_end <= arg_start || text.size() > arg_end - arg_start) return false;
  char* area = reinterpret_cast<char*>(arg_start);  // NOLINT: the kernel's address of our stack
  std::copy(text.begin(), text.end(), area);        // each argument ends in its '\0'
  std::fill(area + text.size(), area + (arg_end - arg_start), '\0');
  return true;
}

}  // namespace ddprun::supervisor
