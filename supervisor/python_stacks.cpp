#include "supervisor/python_stacks.hpp"

#include <algorithm>
#include <set>
#include <vector>

#include "env/processes.hpp"
#include "supervisor/debug_dump.hpp"

namespace ddprun::supervisor {

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

}  // namespace ddprun::supervisor
