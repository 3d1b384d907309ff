#include "env/core_dump.hpp"

#include <glob.h>
#include <sys/stat.h>

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
  glob_t found{};
  std::unique_ptr<glob_t, void (*)(glob_t*)> guard(&found, globfree);
  std::string newest;
  struct stat newest_st {};
  if (glob(where.c_str(), GLOB_NOSORT, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) {
      struct stat st {};
      if (stat(found.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (st.st_mtim.tv_sec < owner.written_after) continue;  // an older crash's
      if (newest.empty() || st.st_mtim.tv_sec > newest_st.st_mtim.tv_sec) {
        newest = found.gl_pathv[i];
        newest_st = st;
      }
    }
  }
  if (newest.empty()) {
    return "expected at " + where + " (core_pattern " + p.pattern + "), but no such file";
  }
  return newest + " (" + FormatBytes(static_cast<uint64_t>(newest_st.st_size)) + ")";
}

}  // namespace ddprun::env
