#include "env/core_dump.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "base/format.hpp"

namespace ddprun::env {

CorePattern ReadCorePattern(const std::string& proc_root) {
  CorePattern p;
  std::ifstream pattern(proc_root + "/sys/kernel/core_pattern");
  std::string line;
  if (std::getline(pattern, line) && !line.empty()) p.pattern = line;
  std::ifstream uses_pid(proc_root + "/sys/kernel/core_uses_pid");
  int flag = 0;
  if (uses_pid >> flag) p.uses_pid = flag != 0;
  return p;
}

std::string ExpandCorePattern(const CorePattern& p, const CoreOwner& owner) {
  if (!p.pattern.empty() && p.pattern.front() == '|') return "";
  std::string out;
  bool has_pid = false;
  for (size_t i = 0; i < p.pattern.size(); ++i) {
    const char c = p.pattern[i];
    if (c != '%' || i + 1 == p.pattern.size()) {
      out.push_back(c);
      continue;
    }
    switch (p.pattern[++i]) {
      case '%':
        out.push_back('%');
        break;
      case 'p':
      case 'P':  // the pid in the initial namespace: ours, outside a container
        out += std::to_string(owner.pid);
        has_pid = true;
        break;
      case 'u':
        out += std::to_string(owner.uid);
        break;
      case 'g':
        out += std::to_string(owner.gid);
        break;
      case 's':
        out += std::to_string(owner.signal);
        break;
      case 'h':
        out += owner.host;
        break;
      default:  // the time, the thread, the executable's name, the limit: unknown here
        out.push_back('*');
        break;
    }
  }
  if (p.uses_pid && !has_pid) out += "." + std::to_string(owner.pid);
  if (out.empty() || out.front() != '/') out = owner.cwd + "/" + out;
  return out;
}

namespace {

// The handler's program, without its directory and arguments.
std::string HandlerName(const std::string& pattern) {
  std::string program = pattern.substr(
      1, pattern.find(' ') == std::string::npos ? std::string::npos : pattern.find(' ') - 1);
  const size_t slash = program.rfind('/');
  return slash == std::string::npos ? program : program.substr(slash + 1);
}

// The newest regular file matching `glob_pattern` written after
// `written_after`, or "" (`newest_st` gets its stat).
std::string NewestMatch(const std::string& glob_pattern, int64_t written_after,
                        struct stat* newest_st) {
  glob_t found{};
  std::unique_ptr<glob_t, void (*)(glob_t*)> guard(&found, globfree);
  std::string newest;
  if (glob(glob_pattern.c_str(), GLOB_NOSORT, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) {
      struct stat st {};
      if (stat(found.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (st.st_mtim.tv_sec < written_after) continue;  // an older crash's
      if (newest.empty() || st.st_mtim.tv_sec > newest_st->st_mtim.tv_sec) {
        newest = found.gl_pathv[i];
        *newest_st = st;
      }
    }
  }
  return newest;
}

// A relative pattern's core is written in the directory the process was in
// when it crashed, which its exit no longer shows: a worker that changed
// directory (Hydra's runs do) left it below where it started, most likely.
// Looked for a few levels down, within a bounded number of directories.
std::string BelowStart(const std::string& start, const std::string& relative, int64_t written_after,
                       struct stat* st) {
  namespace fs = std::filesystem;
  constexpr int kDepth = 4;
  constexpr int kDirectories = 2000;
  std::error_code ec;
  fs::recursive_directory_iterator it(start, fs::directory_options::skip_permission_denied, ec);
  int seen = 0;
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec) || it->is_symlink(ec)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it.depth() >= kDepth - 1) it.disable_recursion_pending();
    if (++seen > kDirectories) break;
    std::string found = NewestMatch(it->path().string() + "/" + relative, written_after, st);
    if (!found.empty()) return found;
  }
  return "";
}

}  // namespace

std::string DescribeCoreDump(const CorePattern& p, const CoreOwner& owner) {
  const std::string where = ExpandCorePattern(p, owner);
  if (where.empty()) {
    const std::string handler = HandlerName(p.pattern);
    const std::string pid = std::to_string(owner.pid);
    if (handler == "systemd-coredump") {
      return "piped to systemd-coredump: coredumpctl gdb " + pid + " (coredumpctl list)";
    }
    if (handler == "apport") return "piped to apport: /var/crash (apport-unpack, then gdb)";
    return "piped to " + handler + " (core_pattern " + p.pattern +
           "; in a container, the host's handler)";
  }
  struct stat newest_st {};
  std::string newest = NewestMatch(where, owner.written_after, &newest_st);
  const bool relative = !p.pattern.empty() && p.pattern.front() != '/';
  if (newest.empty() && relative && where.rfind(owner.cwd + "/", 0) == 0) {
    newest =
        BelowStart(owner.cwd, where.substr(owner.cwd.size() + 1), owner.written_after, &newest_st);
    if (!newest.empty()) {
      return newest + " (" + FormatBytes(static_cast<uint64_t>(newest_st.st_size)) +
             "; the worker had changed directory)";
    }
    return "not at " + where + " (core_pattern " + p.pattern +
           " is relative: the core goes to the worker's working directory when it crashed; "
           "look there if it changed directory)";
  }
  if (newest.empty()) {
    return "expected at " + where + " (core_pattern " + p.pattern + "), but no such file";
  }
  return newest + " (" + FormatBytes(static_cast<uint64_t>(newest_st.st_size)) + ")";
}

}  // namespace ddprun::env
