#include "launcher/worker_specs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "base/unique_fd.hpp"
#include "env/host.hpp"
#include "env/names.hpp"

namespace ddprun::launcher {

namespace {

constexpr int kStdoutBit = 1;
constexpr int kStderrBit = 2;
constexpr char kDefaultPrefix[] = "[${role_name}${local_rank}]:";

// torchrun's routing: a redirected stream goes to its file; teed means
// redirected and also shown with a prefix; a rank outside
// --local_ranks_filter is not shown at all.
supervisor::StreamSpec Route(const LaunchConfig& c, int local_rank, int bit, std::string file,
                             const std::string& prefix) {
  supervisor::StreamSpec s;
  bool teed = (c.tee.For(local_rank) & bit) != 0;
  bool redirected = teed || (c.redirects.For(local_rank) & bit) != 0;
  bool shown = c.local_ranks_filter.empty() || c.local_ranks_filter.count(local_rank) != 0;
  s.file = redirected ? std::move(file) : "";
  s.console = redirected ? (teed && shown) : shown;
  s.prefix = teed ? prefix : "";
  s.fallback_prefix = prefix;
  return s;
}

// The supervisor appends the lines a duplicate filter matches to one file per
// stream and drops them when it cannot open it: open it here first, so that
// the job is refused instead.
Status CheckFilterFile(const char* option, const std::vector<std::string>& filters,
                       const std::string& path) {
  if (filters.empty()) return Status::Ok();
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (fd.valid()) return Status::Ok();
  const int err = errno;
  return InvalidArgument(std::string("--") + option + ": cannot open " + path + ": " +
                         std::strerror(err) + " (errno " + std::to_string(err) +
                         "): make the log directory writable or choose another --log_dir");
}

}  // namespace

std::string SafeSubstitute(const std::string& text,
                           const std::vector<std::pair<std::string, std::string>>& values) {
  if (text.find('$') == std::string::npos) return text;
  auto ident_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text[i] != '$' || i + 1 >= text.size()) {
      out.push_back(text[i++]);
      continue;
    }
    if (text[i + 1] == '$') {  // $$ is a literal $
      out.push_back('$');
      i += 2;
      continue;
    }
    const bool braced = text[i + 1] == '{';
    const size_t start = i + (braced ? 2 : 1);
    size_t end = start;
    if (end < text.size() && ident_start(text[end])) {
      while (end < text.size() && ident_char(text[end])) ++end;
    }
    const bool closed = !braced || (end < text.size() && text[end] == '}');
    const std::string name = text.substr(start, end - start);
    auto known =
        std::find_if(values.begin(), values.end(), [&](const auto& v) { return v.first == name; });
    if (end > start && closed && known != values.end()) {
      out += known->second;
      i = end + (braced ? 1 : 0);
    } else {
      out.push_back(text[i++]);  // another name, or not a name: kept as written
    }
  }
  return out;
}

std::string SubstituteLocalRank(const std::string& arg, int local_rank) {
  return SafeSubstitute(arg, {{"local_rank", std::to_string(local_rank)}});
}

std::string LinePrefix(const std::string& tmpl, const std::string& role, int rank, int local_rank,
                       const std::string& host) {
  return SafeSubstitute(tmpl.empty() ? std::string(kDefaultPrefix) : tmpl,
                        {{"role_name", role},
                         {"local_rank", std::to_string(local_rank)},
                         {"rank", std::to_string(rank)},
                         {"host", host}});
}

StatusOr<std::vector<supervisor::WorkerSpec>> BuildWorkerSpecs(const LaunchConfig& c,
                                                               const Program& program,
                                                               const env::GroupInfo& group,
                                                               const env::LogLayout& layout,
                                                               const env::Environ& environ) {
  const std::string tmpl = env::Lookup(environ, env::kLinePrefixTemplate).value_or(kDefaultPrefix);
  const std::string host = tmpl.find("host") != std::string::npos ? env::Hostname() : "";
  const int attempt = group.restart_count;
  if (Status s = CheckFilterFile("duplicate_stdout_filters", c.duplicate_stdout_filters,
                                 layout.FilteredPath(attempt, "stdout"));
      !s.ok()) {
    return s;
  }
  if (Status s = CheckFilterFile("duplicate_stderr_filters", c.duplicate_stderr_filters,
                                 layout.FilteredPath(attempt, "stderr"));
      !s.ok()) {
    return s;
  }
  std::vector<supervisor::WorkerSpec> specs;
  const bool stderr_is_tty = isatty(STDERR_FILENO) == 1;
  for (int r = 0; r < c.nproc_per_node; ++r) {
    env::WorkerFiles files{layout.ErrorFile(attempt, r), layout.HeartbeatPath(attempt, r),
                           layout.TracePath(attempt, r), layout.DumpDir(attempt),
                           layout.DumpDir(attempt) + "/torch"};
    auto e = env::WorkerEnviron(group, r, files, environ);
    if (!e.ok()) return e.status();
    supervisor::WorkerSpec w;
    w.local_rank = r;
    w.rank = group.base_rank + r;
    w.argv = program.argv;
    for (size_t i = 1; i < w.argv.size(); ++i) w.argv[i] = SubstituteLocalRank(w.argv[i], r);
    w.envp = env::ToEnvp(*e);
    std::string prefix = LinePrefix(tmpl, c.role, w.rank, r, host);
    w.out = Route(c, r, kStdoutBit, layout.StdoutPath(attempt, r), prefix);
    w.err = Route(c, r, kStderrBit, layout.StderrPath(attempt, r), prefix);
    w.out.duplicate_filters = c.duplicate_stdout_filters;
    w.out.filter_file = layout.FilteredPath(attempt, "stdout");
    w.err.duplicate_filters = c.duplicate_stderr_filters;
    w.heartbeat_file = layout.HeartbeatPath(attempt, r);
    if (!group.torch_hook_dir.empty()) {
      w.finished_file = files.torch_dir + "/finished_" + std::to_string(w.rank);
    }
    if (r < static_cast<int>(c.worker_cpus.size())) w.cpus = c.worker_cpus[static_cast<size_t>(r)];
    w.out.track_progress = w.err.track_progress = c.hang_detect_output;
    w.stdin_inherited = c.stdin_ranks.count(r) != 0;
    // stderr's last lines explain a failure (supervisor/explain.hpp) when the
    // worker wrote no error file. Read through a pipe only where that changes
    // nothing the worker can see: a terminal stays the worker's own (colours,
    // progress bars), as under torchrun; a redirected stream goes straight to
    // its file, whose end is read instead (FillTailsFromLogs).
    w.err.keep_tail = w.err.file.empty() && w.err.console && !stderr_is_tty;
    w.err.filter_file = layout.FilteredPath(attempt, "stderr");
    specs.push_back(std::move(w));
  }
  return specs;
}

}  // namespace ddprun::launcher
