#include "supervisor/python_stacks.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include "base/read_file.hpp"
#include "env/processes.hpp"
#include "supervisor/debug_dump.hpp"

namespace ddprun::supervisor {

std::string FindPySpy(pid_t python) {
  if (std::string on_path = FindOnPath("py-spy"); !on_path.empty()) return on_path;
  const std::string proc = "/proc/" + std::to_string(python);
  std::string argv0 = ReadSmallFile(proc + "/cmdline");
  argv0 = argv0.substr(0, argv0.find('\0'));
  const size_t slash = argv0.rfind('/');
  if (slash == std::string::npos) return "";
  if (argv0[0] != '/') {  // relative to the worker's directory, not ddprun's
    std::error_code ec;
    const auto cwd = std::filesystem::read_symlink(proc + "/cwd", ec);
    if (ec) return "";
    argv0 = cwd.string() + "/" + argv0;
  }
  const std::string beside = argv0.substr(0, argv0.rfind('/') + 1) + "py-spy";
  return access(beside.c_str(), X_OK) == 0 ? beside : "";
}

std::string ChildStacks(const std::string& py_spy, pid_t pid, std::chrono::milliseconds timeout) {
  const std::vector<pid_t> threads = env::ThreadsOf(pid, 1024);
  const bool parent = std::any_of(threads.begin(), threads.end(),
                                  [pid](pid_t tid) { return !env::ChildrenOf(pid, tid).empty(); });
  if (!parent) return "";
  const ToolResult all =
      RunTool({py_spy, "dump", "--subprocesses", "--pid", std::to_string(pid)}, timeout);
  std::string out = "\nits child processes (py-spy dump --subprocesses):\n";
  // Its own stacks come first, then each child's after a line of dashes.
  const size_t dashes = all.output.find("\n--------");
  if (!all.error.empty()) return out + "  " + all.error + "\n";
  if (dashes == std::string::npos) {
    return out + (all.timed_out ? "  py-spy took longer than the tools' time, and was stopped\n"
                                : "  none py-spy could read\n");
  }
  return out + all.output.substr(all.output.find('\n', dashes + 1) + 1);
}

std::string OtherStacks(const std::string& py_spy, pid_t worker, pid_t python,
                        std::chrono::milliseconds timeout) {
  const std::vector<env::ProcEntry> table = env::ReadProcTable();
  std::set<pid_t> shown_already{python};
  for (const env::ProcEntry& e : env::Descendants(table, python)) shown_already.insert(e.pid);
  std::vector<pid_t> others{worker};
  for (const env::ProcEntry& e : env::Descendants(table, worker)) {
    if (shown_already.count(e.pid) == 0) others.push_back(e.pid);
  }
  std::string out;
  const size_t looked = std::min(others.size(), static_cast<size_t>(kMaxOtherProcesses));
  for (size_t i = 0; i < looked; ++i) {
    const std::string pid = std::to_string(others[i]);
    const ToolResult r = RunTool({py_spy, "dump", "--pid", pid}, timeout);
    if (!r.error.empty() || r.exit_code != 0) continue;  // not a Python py-spy can read
    out += (others[i] == worker ? "the worker itself:\n" : "") + r.output;
  }
  if (out.empty()) return "";
  std::string more;
  if (others.size() > looked) {
    more = "(" + std::to_string(others.size() - looked) + " more processes not looked at)\n";
  }
  return "\nthe worker's other Python processes (py-spy dump of each):\n" + out + more;
}

std::string MainThreadStack(const std::string& stacks, pid_t pid, size_t max_lines) {
  const std::string eu_header = "TID " + std::to_string(pid) + ":";
  const std::string gdb_tag = "(LWP " + std::to_string(pid) + ")";
  std::stringstream in(stacks);
  std::string line, out;
  bool inside = false;
  size_t lines = 0;
  while (std::getline(in, line) && lines < max_lines) {
    const bool header = line.rfind("TID ", 0) == 0 || line.rfind("Thread ", 0) == 0;
    if (!inside) {
      inside = line == eu_header ||
               (line.rfind("Thread ", 0) == 0 && line.find(gdb_tag) != std::string::npos);
      continue;
    }
    if (header || line.empty()) break;
    out += line + "\n";
    ++lines;
  }
  return out;
}

std::string MainThreadPythonStack(const std::string& py_spy, size_t max_lines) {
  std::stringstream in(py_spy);
  std::string line, out;
  bool inside = false;
  size_t lines = 0;
  while (std::getline(in, line) && lines < max_lines) {
    if (!inside) {
      inside = line.rfind("Thread ", 0) == 0 && line.find("\"MainThread\"") != std::string::npos;
      if (inside) out += "python " + line.substr(0, line.find(':')) + ":\n";
      continue;
    }
    const size_t text = line.find_first_not_of(' ');
    if (line.rfind("Thread ", 0) == 0 || text == std::string::npos) break;
    out += line.substr(text) + "\n";
    ++lines;
  }
  return out;
}

namespace {

// Where the stacks of the rank's process end in a rank file's py-spy part:
// another process's begin (ChildStacks, OtherStacks, py-spy's own header).
bool NextProcess(const std::string& line) {
  for (const char* start :
       {"its child processes (", "Process ", "the worker itself:", "the rank's Python"}) {
    if (line.rfind(start, 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::string OtherPythonThreads(const std::string& py_spy, size_t max_threads, size_t frames) {
  std::stringstream in(py_spy);
  std::string line, out;
  size_t shown = 0, more = 0, taken = 0;
  bool inside = false, seen = false;
  while (std::getline(in, line)) {
    if (line.rfind("Thread ", 0) == 0) {
      seen = true;
      const size_t quote = line.find('"');
      std::string name = quote == std::string::npos ? "" : line.substr(quote);
      // A name with a line break in it goes on below, unindented: its first line is shown.
      if (name.size() < 2 || name.back() != '"') name += "...\"";
      inside = name != "\"MainThread\"" && name != "\"ddprun-torch-hook\"";
      if (inside && shown == max_threads) {
        ++more;
        inside = false;
      } else if (inside) {
        ++shown;
        taken = 0;
        out += "python " + line.substr(0, line.find(' ', 7)) + " " + name + ":\n";
      }
      continue;
    }
    if (seen && NextProcess(line)) break;  // the rank's threads end (a child's follow)
    const size_t text = line.find_first_not_of(' ');
    if (text == std::string::npos || text == 0) continue;  // a blank, a name's next line
    if (inside && taken < frames) {
      out += line.substr(text) + "\n";
      ++taken;
    }
  }
  if (more > 0) out += "and " + std::to_string(more) + " more thread(s): see the rank file\n";
  return out;
}

}  // namespace ddprun::supervisor
