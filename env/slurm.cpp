#include "env/slurm.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <fstream>

#include "base/command.hpp"
#include "base/parse.hpp"
#include "env/hostlist.hpp"
#include "env/names.hpp"
#include "env/processes.hpp"
#include "env/worker_env.hpp"

namespace ddprun::env {

namespace {

// The step's value of a variable, else the job's (older Slurm releases and
// hand-made environments set only the latter).
std::optional<std::string> StepOrJob(const Environ& e, const char* step, const char* job) {
  if (auto v = Lookup(e, step); v && !v->empty()) return v;
  if (auto v = Lookup(e, job); v && !v->empty()) return v;
  return std::nullopt;
}

StatusOr<int> Count(const std::string& name, const std::string& value, long long lo) {
  auto n = ParseInteger(name, value, lo, 1 << 24, "a whole number >= " + std::to_string(lo));
  if (!n.ok()) return n.status();
  return static_cast<int>(*n);
}

}  // namespace

int SlurmStep::TasksOnThisNode() const {
  if (node_id >= 0 && node_id < static_cast<int>(tasks_per_node.size())) {
    return tasks_per_node[node_id];
  }
  // No per-node list: an even share, rounded up (a mistake shows as > 1).
  return (num_tasks + num_nodes - 1) / num_nodes;
}

StatusOr<std::vector<int>> ExpandTasksPerNode(std::string_view text) {
  const std::string accepted = "counts such as 2(x3),1";
  const std::string subject = std::string(kSlurmStepTasksPerNode);
  std::vector<int> out;
  for (const auto& item : SplitList(std::string(text))) {
    std::string count = item;
    int repeat = 1;
    if (auto open = item.find("(x"); open != std::string::npos) {
      if (item.back() != ')') return InvalidValue(subject, std::string(text), accepted);
      auto r = ParseInteger(subject, item.substr(open + 2, item.size() - open - 3), 1, 1 << 20,
                            accepted);
      if (!r.ok()) return InvalidValue(subject, std::string(text), accepted);
      repeat = static_cast<int>(*r);
      count = item.substr(0, open);
    }
    auto n = ParseInteger(subject, count, 0, 1 << 20, accepted);
    if (!n.ok()) return InvalidValue(subject, std::string(text), accepted);
    if (out.size() + static_cast<size_t>(repeat) > (1u << 20)) {
      return InvalidValue(subject, std::string(text), "at most 2^20 nodes");
    }
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(*n));
  }
  if (out.empty()) return InvalidValue(subject, std::string(text), accepted);
  return out;
}

StatusOr<std::optional<SlurmStep>> ReadSlurmStep(const Environ& environ) {
  auto step_id = Lookup(environ, kSlurmStepId);
  if (!step_id || step_id->empty()) return std::optional<SlurmStep>();
  SlurmStep s;
  s.step_id = *step_id;
  s.job_id = StepOrJob(environ, kSlurmJobId, kSlurmJobIdOld).value_or("");
  if (s.job_id.empty()) {
    return InvalidArgument(std::string(kSlurmStepId) + " is set but " + kSlurmJobId +
                           " is not: this is not the environment of a Slurm job step");
  }
  struct CountVar {
    const char* step;
    const char* job;
    int* field;
    long long lo;
  };
  for (const auto& v : {CountVar{kSlurmStepNumNodes, kSlurmNnodes, &s.num_nodes, 1},
                        CountVar{kSlurmStepNumTasks, kSlurmNtasks, &s.num_tasks, 1},
                        CountVar{kSlurmNodeId, kSlurmNodeId, &s.node_id, 0}}) {
    auto text = StepOrJob(environ, v.step, v.job);
    if (!text) continue;
    auto n = Count(v.step, *text, v.lo);
    if (!n.ok()) return n.status();
    *v.field = *n;
  }
  if (s.node_id >= s.num_nodes) {
    return InvalidArgument(std::string(kSlurmNodeId) + "=" + std::to_string(s.node_id) +
                           " is not below " + kSlurmStepNumNodes + "=" +
                           std::to_string(s.num_nodes));
  }
  if (auto tpn = StepOrJob(environ, kSlurmStepTasksPerNode, kSlurmTasksPerNode)) {
    auto counts = ExpandTasksPerNode(*tpn);
    if (!counts.ok()) return counts.status();
    s.tasks_per_node = *counts;
  }
  if (auto list = StepOrJob(environ, kSlurmStepNodelist, kSlurmNodelist)) {
    auto first = FirstHost(*list);
    if (!first.ok()) return first.status().Annotate(kSlurmStepNodelist);
    s.nodelist = *list;
    s.first_host = *first;
  }
  if (s.num_nodes > 1 && s.first_host.empty()) {
    // Real steps always say where they run: a half-copied environment.
    return InvalidArgument(std::string("a Slurm step of ") + std::to_string(s.num_nodes) +
                           " nodes without its node list: " + kSlurmStepNodelist + " (or " +
                           kSlurmNodelist +
                           ") is not set; run ddprun under srun, or give the "
                           "store's host with --master_addr / --rdzv_endpoint and --slurm=off");
  }
  s.node_name = Lookup(environ, kSlurmdNodename).value_or("");
  if (auto restarts = Lookup(environ, kSlurmRestartCount); restarts && !restarts->empty()) {
    auto n = Count(kSlurmRestartCount, *restarts, 0);
    if (!n.ok()) return n.status();
    s.restart_count = *n;
  }
  return std::optional<SlurmStep>(std::move(s));
}

int SlurmStepPort(const SlurmStep& step) {
  // FNV-1a: stable across hosts and releases (std::hash is neither).
  uint32_t h = 2166136261u;
  for (char c : step.Id()) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return 20000 + static_cast<int>(h % 10000);
}

namespace {

// The value of the first "Key = value" line of `scontrol show config` output
// whose key is `key`, trimmed; nullopt when there is none.
std::optional<std::string_view> ConfigValue(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = line.find('=');
    if (line.rfind(key, 0) != 0 || eq == std::string_view::npos) continue;
    std::string_view name = line.substr(0, eq);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (name != key) continue;
    std::string_view value = line.substr(eq + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\r')) value.remove_suffix(1);
    return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> ParseKillWait(std::string_view text) {
  const std::optional<std::string_view> value = ConfigValue(text, "KillWait");
  if (!value) return std::nullopt;
  int seconds = 0;
  size_t digits = 0;
  while (digits < value->size() && digits < 7 &&
         std::isdigit(static_cast<unsigned char>((*value)[digits]))) {
    seconds = seconds * 10 + ((*value)[digits++] - '0');
  }
  return digits > 0 ? std::optional<int>(seconds) : std::nullopt;
}

std::optional<std::string> ParseNodeAddr(std::string_view text) {
  size_t pos = 0;
  while ((pos = text.find("NodeAddr=", pos)) != std::string_view::npos) {
    if (pos == 0 || text[pos - 1] == ' ' || text[pos - 1] == '\n') {
      size_t start = pos + 9;
      size_t end = text.find_first_of(" \n", start);
      std::string addr(text.substr(start, end == std::string_view::npos ? end : end - start));
      if (!addr.empty() && addr != "(null)") return addr;
    }
    pos += 9;
  }
  return std::nullopt;
}

std::optional<std::string> ReadNodeAddr(const std::string& name) {
  // The name comes from SLURM_STEP_NODELIST: quote it for the shell.
  if (name.empty() || name.find('\'') != std::string::npos || !OnPath("scontrol")) {
    return std::nullopt;
  }
  std::string text;
  for (const auto& line :
       CommandLines("timeout 5 scontrol show node -o '" + name + "' 2>/dev/null")) {
    text += line + "\n";
  }
  return ParseNodeAddr(text);
}

SlurmConfig ParseSlurmConfig(std::string_view text) {
  SlurmConfig config;
  config.kill_wait = ParseKillWait(text);
  if (auto proctrack = ConfigValue(text, "ProctrackType"))
    config.proctrack = std::string(*proctrack);
  return config;
}

SlurmConfig ReadSlurmConfig() {
  SlurmConfig config;
  if (!OnPath("scontrol")) {
    config.unread = "scontrol is not on PATH";
    return config;
  }
  std::string text;
  for (const auto& line : CommandLines("timeout 5 scontrol show config 2>/dev/null")) {
    text += line + "\n";
  }
  config = ParseSlurmConfig(text);
  if (text.empty()) {
    config.unread = "scontrol show config failed or did not answer within 5 s: is slurmctld up?";
  }
  return config;
}

bool SignalsReachDescendants(const std::string& proctrack) {
  return proctrack == "proctrack/cgroup" || proctrack == "proctrack/linuxproc";
}

bool IsAncestorSlurmstepd(pid_t pid) {
  if (pid <= 1) return false;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(comm, name) || name != "slurmstepd") return false;
  // Walk up from this process: the step's daemon is one of its parents.
  pid_t p = getppid();
  for (int depth = 0; p > 1 && depth < 64; ++depth) {
    if (p == pid) return true;
    const auto entry = ReadProcEntry(p);
    if (!entry) return false;
    p = entry->ppid;
  }
  return false;
}

}  // namespace ddprun::env
