#include "launcher/option_table.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <sstream>

#include "launcher/option_values.hpp"

namespace ddprun::launcher {

const std::vector<OptionDef>& OptionTable() {
  static const std::vector<OptionDef> kTable = {
      {"nnodes", 0, "N|MIN:MAX", "1:1", true,
       "number of nodes, or the range an elastic (c10d) job may use"},
      {"nproc_per_node", 0, "N|cpu|gpu|auto", "1", true,
       "workers per node: a number, cpu (one per CPU), gpu (one per visible GPU), auto (gpu if "
       "there are GPUs, else cpu)"},
      {"rdzv_backend", 0, "static|c10d", "static", true,
       "rendezvous backend: static or c10d (etcd and etcd-v2 are not supported yet)"},
      {"rdzv_endpoint", 0, "HOST[:PORT]", nullptr, true,
       "where the rendezvous store is: c10d (port 29400 by default; the agent on that address "
       "hosts it), or static in place of --master_addr/--master_port"},
      {"rdzv_id", 0, "ID", "none", true,
       "job id: becomes TORCHELASTIC_RUN_ID and names the log sub-directory"},
      {"rdzv_conf", 0, "K=V,...", nullptr, true,
       "rendezvous settings: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
       "keep_alive_max_attempt, read_timeout, is_host, timeout, token, store_type (tcp); "
       "close_timeout, heartbeat_timeout and use_libuv have no effect"},
      {"standalone", 0, nullptr, nullptr, true,
       "single-node job on a free local port with a random run id (implies c10d)"},
      {"max_restarts", 0, "N", "0", true, "worker group restarts allowed after failures"},
      {"monitor_interval", 0, "SECONDS", "0.1", true,
       "accepted for torchrun compatibility; ddprun reacts to events, not polls"},
      {"start_method", 0, "spawn|fork|forkserver", "spawn", true,
       "accepted for torchrun compatibility; workers are always new processes"},
      {"event_log_handler", 0, "null|json|console|dynamic_rendezvous", "null", true,
       "the agent's events as JSON lines (json or console), to DDPRUN_EVENT_LOG or else stderr"},
      {"role", 0, "NAME", "default", true, "worker role: ROLE_NAME and the tee line prefix"},
      {"module", 'm', nullptr, nullptr, true, "run the program as a Python module (python -m)"},
      {"no_python", 0, nullptr, nullptr, true, "execute the program directly, never under Python"},
      {"run_path", 0, nullptr, nullptr, true,
       "run the script (a path) with runpy.run_path in each worker"},
      {"log_dir", 0, "DIR", nullptr, true,
       "base directory for worker logs and error files (/dev/null: none)"},
      {"redirects", 'r', "0|1|2|3|R:V,...", "0", true,
       "send worker stdout (1), stderr (2) or both (3) to files only, for all or some local ranks"},
      {"tee", 't', "0|1|2|3|R:V,...", "0", true,
       "copy worker streams to files and show them with a line prefix"},
      {"stdin", 0, "auto|all|none|R,...", "auto", true,
       "ddprun: which workers read ddprun's stdin (a terminal for pdb or input()): auto is local "
       "rank 0, all is every worker (torchrun), none is /dev/null for all, or a list of local "
       "ranks; the others read /dev/null"},
      {"local_ranks_filter", 0, "R,R,...", nullptr, true,
       "show only these local ranks' output on the console"},
      {"duplicate_stdout_filters", 0, "TEXT,...", nullptr, true,
       "copy stdout lines containing any TEXT to attempt_N/filtered_stdout.log (,, is a comma)"},
      {"duplicate_stderr_filters", 0, "TEXT,...", nullptr, true,
       "copy stderr lines containing any TEXT to attempt_N/filtered_stderr.log (,, is a comma)"},
      {"node_rank", 0, "N", "0", true,
       "rank of this node, 0..N-1: static needs it on every node but node 0; c10d honours it "
       "when given"},
      {"master_addr", 0, "HOST", "127.0.0.1", true,
       "static: the node-rank-0 host, where the rendezvous store is"},
      {"master_port", 0, "PORT", "29500", true, "static: the rendezvous store's port"},
      {"local_addr", 0, "HOST", nullptr, true,
       "this node's address: how other nodes reach it, and MASTER_ADDR when it is node rank 0"},
      {"logs_specs", 0, "NAME", nullptr, false,
       "torchrun.logs_specs entry point: default (the layout ddprun writes); others are not "
       "supported yet"},
      {"numa_binding", 0, "node|socket|exclusive|core-complex", nullptr, true,
       "bind each worker to CPUs near its GPU (the GPU whose index is its local rank), as "
       "torchrun does: node, every CPU of the GPU's NUMA node; socket, of every node of its "
       "socket; exclusive, its own whole cores of that node; core-complex, one L3 group of it"},
      {"cpu_binding", 0, "none|spread|compact", "none", true,
       "ddprun: bind each worker to its own share of the allowed CPUs: spread balances workers "
       "over NUMA nodes, compact fills them in order; workers share CPUs (with a warning) only "
       "when there are fewer CPUs than workers"},
      {"signals_to_handle", 0, "SIG,...", "SIGTERM,SIGINT,SIGHUP,SIGQUIT", true,
       "signals ddprun traps and forwards to workers; SIGUSR1/SIGUSR2 are forwarded without "
       "stopping the job"},
      {"shutdown_timeout", 0, "SECONDS", "30", true,
       "grace between SIGTERM (or the forwarded signal) and SIGKILL when stopping workers"},
      {"hang_timeout", 0, "SECONDS", "0 (off)", true,
       "a worker that beat at least once and then is silent this long is hung: dump every "
       "rank, stop, restart or fail (exit 124); 300 or more is a sound start for training"},
      {"startup_timeout", 0, "SECONDS", "0 (off)", true,
       "a worker whose first beat does not come within this is hung"},
      {"exit_timeout", 0, "SECONDS", "the --hang_timeout", true,
       "ddprun: a worker that removed DDPRUN_HEARTBEAT_FILE (finishing; the PyTorch hook does "
       "at exit) and has not exited this long after is hung at exit: dumped, stopped, never "
       "restarted (exit 124); 0: wait for its exit without a bound"},
      {"hang_detect", 0, "heartbeat|output|torch", "heartbeat", true,
       "what counts as progress: touches of DDPRUN_HEARTBEAT_FILE, or also any output line, or "
       "also each PyTorch collective (a hook on PYTHONPATH reads PyTorch's flight recorder)"},
      {"virtual_local_rank", 0, nullptr, nullptr, true,
       "give every worker LOCAL_RANK=0 and exactly one device in CUDA_VISIBLE_DEVICES"},
      {"gpus", 0, "LIST", nullptr, false,
       "ddprun: set CUDA_VISIBLE_DEVICES=LIST for every worker: host indices or GPU-/MIG- "
       "UUIDs (e.g. 0,6,7), each a GPU of this host, once (checked before any worker starts)"},
      {"slurm", 0, "auto|node|off", "auto", true,
       "ddprun: inside a Slurm job step (srun), take --nnodes, --node_rank, --rdzv_id and the "
       "store's host and port from the step where not given, refuse several agents per node, "
       "and give workers their own SLURM_PROCID etc.; node: the same, and fail outside a step; "
       "off: ignore Slurm"},
      {"threads_per_worker", 0, "N", "64", false,
       "ddprun: threads each worker is expected to run, to check RLIMIT_NPROC (ulimit -u) "
       "before spawning; PyTorch workers with DataLoader workers and NCCL/Gloo threads commonly "
       "use dozens"},
      {"doctor", 0, nullptr, nullptr, false,
       "check this host for a job (limits, /dev/shm, GPUs, NCCL, CUDA, network, ports), print a "
       "table and exit (also: ddprun doctor [options])"},
      {"print_completion", 0, "bash|zsh", nullptr, false,
       "print the completion script for the shell and exit: source <(ddprun --print-completion "
       "bash) in ~/.bashrc; for zsh, save the script as _ddprun in a directory of $fpath"},
      {"help", 'h', nullptr, nullptr, false, "show this help and exit"},
      {"version", 0, nullptr, nullptr, false, "show the version and exit"},
  };
  return kTable;
}

std::vector<std::string_view> ValueWords(const OptionDef& def) {
  std::vector<std::string_view> words;
  if (def.value_name == nullptr) return words;
  std::string_view rest = def.value_name;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    const std::string_view alternative = rest.substr(0, bar);
    const bool placeholder = std::any_of(alternative.begin(), alternative.end(),
                                         [](char c) { return c >= 'A' && c <= 'Z'; });
    if (!alternative.empty() && !placeholder) words.push_back(alternative);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return words;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {

std::string Underscored(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

// The option `wanted` most likely misspells, or none when every one is far
// ("--bogus" is no misspelt --gpus): a third of its letters, at least 2
// (1 for a name of 3 letters or fewer: "--x" is no --nnodes).
std::optional<std::string> Closest(const std::string& wanted) {
  const OptionDef* best = nullptr;
  size_t best_d = SIZE_MAX;
  for (const auto& def : OptionTable()) {
    std::string name = def.name;
    // A misspelt prefix ("nprocs") is as close as its match to the option's start.
    size_t d = std::min(EditDistance(wanted, name),
                        EditDistance(wanted, name.substr(0, wanted.size())) + 1);
    if (d < best_d) best_d = d, best = &def;
  }
  const size_t near = wanted.size() < 4 ? 1 : std::max<size_t>(2, wanted.size() / 3);
  if (best_d > near) return std::nullopt;
  std::string dashed = Underscored(best->name);
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  return "--" + dashed;
}

}  // namespace

bool IsTorchrunOption(std::string_view name) {
  // torchrun 2.12's long options (torch.distributed.run.get_args_parser).
  static constexpr std::string_view kTorchrun[] = {"duplicate_stderr_filters",
                                                   "duplicate_stdout_filters",
                                                   "event_log_handler",
                                                   "help",
                                                   "local_addr",
                                                   "local_ranks_filter",
                                                   "log_dir",
                                                   "logs_specs",
                                                   "master_addr",
                                                   "master_port",
                                                   "max_restarts",
                                                   "module",
                                                   "monitor_interval",
                                                   "nnodes",
                                                   "no_python",
                                                   "node_rank",
                                                   "nproc_per_node",
                                                   "numa_binding",
                                                   "rdzv_backend",
                                                   "rdzv_conf",
                                                   "rdzv_endpoint",
                                                   "rdzv_id",
                                                   "redirects",
                                                   "role",
                                                   "run_path",
                                                   "shutdown_timeout",
                                                   "signals_to_handle",
                                                   "standalone",
                                                   "start_method",
                                                   "tee",
                                                   "virtual_local_rank"};
  return std::find(std::begin(kTorchrun), std::end(kTorchrun), name) != std::end(kTorchrun);
}

StatusOr<const OptionDef*> FindLongOption(const std::string& name) {
  std::string wanted = Underscored(name);
  std::vector<const OptionDef*> prefixed;
  for (const auto& def : OptionTable()) {
    if (wanted == def.name) return &def;
    if (!wanted.empty() && std::string(def.name).rfind(wanted, 0) == 0) prefixed.push_back(&def);
  }
  if (prefixed.size() == 1) return prefixed[0];
  // What a torchrun command line means under torchrun: --t is --tee, though
  // ddprun's own --threads_per_worker shares the prefix.
  std::vector<const OptionDef*> torchrun;
  for (const auto* d : prefixed) {
    if (IsTorchrunOption(d->name)) torchrun.push_back(d);
  }
  if (torchrun.size() == 1) return torchrun[0];
  if (prefixed.size() > 1) {
    std::string names;
    for (const auto* d : prefixed) names += std::string(names.empty() ? "" : ", ") + "--" + d->name;
    return InvalidArgument("ambiguous option --" + name + ": could be " + names);
  }
  const auto closest = Closest(wanted);
  return InvalidArgument("unknown option --" + name +
                         (closest ? ": did you mean " + *closest + "?" : std::string()) +
                         " (ddprun --help lists every option)");
}

const OptionDef* FindShortOption(char c) {
  for (const auto& def : OptionTable()) {
    if (def.short_name == c) return &def;
  }
  return nullptr;
}

namespace {

void Record(const OptionDef& def, const std::optional<std::string>& value, SplitArgs& out) {
  out.launcher.push_back("--" + std::string(def.name) + (value ? "=" + *value : ""));
  const std::string now = value.value_or("1");
  if (auto it = out.values.find(def.name); it != out.values.end() && it->second != now) {
    out.replaced.emplace_back(def.name, it->second);
  }
  out.values[def.name] = now;
}

// Rewrites one option token (and maybe takes the next one as its value).
Status TakeOption(const std::vector<std::string>& args, size_t& i, SplitArgs& out) {
  const std::string& arg = args[i];
  const OptionDef* def = nullptr;
  std::optional<std::string> value;
  if (arg.rfind("--", 0) == 0) {
    size_t eq = arg.find('=');
    auto found = FindLongOption(arg.substr(2, eq == std::string::npos ? eq : eq - 2));
    if (!found.ok()) return found.status();
    def = *found;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
  } else {
    // As argparse: flags may be bundled, the last one taking a value ("-mt3"
    // is -m -t 3).
    size_t at = 1;
    for (;; ++at) {
      def = FindShortOption(arg[at]);
      if (def == nullptr) {
        return InvalidArgument("unknown option -" + std::string(1, arg[at]) +
                               (at > 1 ? " in " + arg : "") +
                               ": the short options are -m, -r, -t and -h");
      }
      if (def->value_name != nullptr || at + 1 >= arg.size() || arg[at + 1] == '=') break;
      Record(*def, std::nullopt, out);
    }
    if (at + 1 < arg.size()) {
      if (def->value_name == nullptr) {
        return InvalidArgument("option -" + std::string(1, arg[at]) + " takes no value (got " +
                               arg + ")");
      }
      value = arg.substr(arg[at + 1] == '=' ? at + 2 : at + 1);
    }
  }
  if (def->value_name == nullptr && value) {
    return InvalidArgument("option --" + std::string(def->name) + " takes no value (got " + arg +
                           ")");
  }
  if (def->value_name != nullptr && !value) {
    if (i + 1 >= args.size()) {
      return InvalidArgument("option --" + std::string(def->name) +
                             " needs a value: " + def->value_name);
    }
    // As torchrun's argparse: what looks like an option (or "--") is no
    // value; a negative number is.
    const std::string& next = args[i + 1];
    const bool option_like = next.size() > 1 && next[0] == '-' &&
                             next.find_first_not_of("0123456789.", 1) != std::string::npos;
    if (option_like) {
      return InvalidArgument("option --" + std::string(def->name) + " needs a value: " +
                             def->value_name + " (got the option-like '" + next + "'; write --" +
                             def->name + "=" + next + " for a value that starts with '-')");
    }
    value = args[++i];
  }
  Record(*def, value, out);
  return Status::Ok();
}

}  // namespace

StatusOr<SplitArgs> SplitCommandLine(const std::vector<std::string>& args) {
  SplitArgs out;
  size_t i = 0;
  bool separated = false;  // a "--" ended the options
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      separated = true;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;
    if (Status s = TakeOption(args, i, out); !s.ok()) return s;
  }
  if (i < args.size()) {
    out.program = args[i];
    // torchrun (argparse) takes the first "--" as its own also right after
    // the program: `train.py -- --lr 1` passes `--lr 1`.
    size_t first = i + 1;
    if (!separated && first < args.size() && args[first] == "--") ++first;
    out.program_args.assign(args.begin() + static_cast<long>(first), args.end());
  }
  return out;
}

namespace {

// `text` read as a number, where the whole of it is one (blanks around it allowed).
std::optional<double> AsNumber(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (end == begin || errno != 0) return std::nullopt;
  while (*end == ' ' || *end == '\t') ++end;
  return *end == '\0' ? std::optional<double>(v) : std::nullopt;
}

// The same value spelled otherwise: 30 and 30.0, 2 and 02, D and D/, 1 and 1:1 (--nnodes),
// --rdzv_conf's keys in another order (attack 102: each was said to replace the other).
bool SameValue(const std::string& name, const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (name == "rdzv_conf") {
    auto x = ParseRdzvConf(a);
    auto y = ParseRdzvConf(b);
    return x.ok() && y.ok() &&
           std::equal(x->begin(), x->end(), y->begin(), y->end(), [](const auto& p, const auto& q) {
             return p.first == q.first && SameValue("", p.second, q.second);
           });
  }
  if (name == "nnodes") {
    const auto range = [](const std::string& v) {
      return v.find(':') == std::string::npos ? v + ":" + v : v;
    };
    return range(a) == range(b);
  }
  const auto x = AsNumber(a);
  const auto y = AsNumber(b);
  if (x && y) return *x == *y;
  if (name == "log_dir" || name == "run_path") {
    const auto normal = [](const std::string& v) {
      std::string p = std::filesystem::path(v).lexically_normal().string();
      while (p.size() > 1 && p.back() == '/') p.pop_back();
      return p;
    };
    return normal(a) == normal(b);
  }
  return false;
}

// The --rdzv_conf that keeps the first's keys the last leaves out: "" when it leaves none.
std::string Joined(const std::string& first, const std::string& last) {
  auto a = ParseRdzvConf(first);
  auto b = ParseRdzvConf(last);
  if (!a.ok() || !b.ok()) return "";
  std::string kept;
  for (const auto& [key, value] : *a) {
    if (b->count(key) == 0) kept += key + "=" + value + ",";
  }
  return kept.empty() ? "" : kept + last;
}

}  // namespace

std::optional<std::string> RepeatedOptionWarning(const std::string& name, const std::string& first,
                                                 const std::string& last) {
  if (SameValue(name, first, last)) return std::nullopt;
  std::string text = "--" + name + " was given twice: its last value (" + last +
                     ") replaces the first (" + first + "), as under torchrun";
  if (name == "rdzv_conf") {
    if (const std::string joined = Joined(first, last); !joined.empty()) {
      text +=
          "; to set several keys, give them in one --rdzv_conf, comma-separated (" + joined + ")";
    }
  }
  return text;
}

std::string HelpText() {
  std::ostringstream o;
  o << "usage: ddprun [options] PROGRAM [ARGS...]\n"
       "       ddprun [options] -m MODULE [ARGS...]\n"
       "       ddprun doctor [--json] [options]   check this host for the job, print a table "
       "(or JSON)\n"
       "       ddprun dump [PID]                  ask a running ddprun for a debug dump of its "
       "workers\n\n"
       "Launches and supervises PROGRAM on every local worker, as torchrun does. A .py file runs\n"
       "under python3 -u, an executable runs directly. Every option has a dashed spelling too\n"
       "(--nproc-per-node), and most read PET_<NAME> when not given.\n\noptions:\n";
  for (const auto& def : OptionTable()) {
    std::string names;
    if (def.short_name != 0) names += std::string("-") + def.short_name + ", ";
    names += std::string("--") + def.name;
    if (def.value_name != nullptr) names += std::string(" ") + def.value_name;
    o << "  " << names << "\n      " << def.help;
    if (def.default_text != nullptr) o << " (default: " << def.default_text << ")";
    o << "\n";
  }
  o << "\nexit status: 0 success; the root-cause worker's exit code, or 128+N if it died of\n"
       "signal N; 1 other launcher failures; 2 usage error or option not supported yet; 74\n"
       "workers succeeded but a log file could not be written; 124 the root cause was a hung\n"
       "worker; 126 program or script not executable or readable; 127 program or interpreter\n"
       "not found; 128+N when ddprun itself was stopped by signal N. See ddprun(1).\n";
  return o.str();
}

}  // namespace ddprun::launcher
