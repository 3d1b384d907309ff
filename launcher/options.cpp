#include "launcher/options.hpp"

#include <array>
#include <csignal>
#include <set>
#include <string_view>

#include "base/parse.hpp"
#include "env/gloo_address.hpp"
#include "env/names.hpp"
#include "env/slurm.hpp"
#include "env/worker_env.hpp"
#include "launcher/job_stores.hpp"
#include "launcher/option_checks.hpp"
#include "launcher/option_table.hpp"
#include "launcher/option_values.hpp"
#include "launcher/raw_options.hpp"
#include "launcher/slurm_options.hpp"
#include "rendezvous/sockets.hpp"
#include "supervisor/exit_status.hpp"

namespace ddprun::launcher {

namespace {

Status ApplyFlags(const RawOptions& raw, LaunchConfig& c) {
  for (auto [name, field] : {std::pair{"standalone", &c.standalone},
                             {"module", &c.module},
                             {"no_python", &c.no_python},
                             {"run_path", &c.run_path},
                             {"virtual_local_rank", &c.virtual_local_rank}}) {
    if (auto v = raw.Get(name)) {
      auto b = ParseBool(name, *v);
      if (!b.ok()) return b.status();
      *field = *b;
    }
  }
  if (c.module && c.no_python) {
    return InvalidArgument(
        "-m/--module and --no_python cannot be used together: -m runs a "
        "Python module, --no_python runs a program without Python");
  }
  // torchrun quietly ignores the other one; which was meant is not known.
  if (c.run_path && (c.module || c.no_python)) {
    return InvalidArgument(
        std::string("--run_path and ") + (c.module ? "-m/--module" : "--no_python") +
        " cannot be used together: --run_path runs a Python file in the launcher's place, " +
        (c.module ? "-m runs a Python module" : "--no_python runs a program without Python") +
        "; give one of them (torchrun ignores " + (c.module ? "-m" : "--no_python") + " then)");
  }
  return Status::Ok();
}

Status ApplyUnsupported(const RawOptions& raw) {
  if (auto v = raw.Get("logs_specs"); v && *v != "default") {
    return Unimplemented("--logs_specs=" + *v +
                         " is not supported yet: ddprun writes one log layout, torchrun's "
                         "default (--logs_specs=default); drop the option or give default");
  }
  return Status::Ok();
}

// torchrun's handlers are null and console (its events, logged); ddprun's
// console and json both write its own events as JSON lines
// (launcher/machine_reports.hpp), to DDPRUN_EVENT_LOG or else stderr.
Status ApplyEventLog(const RawOptions& raw, LaunchConfig& c) {
  if (auto v = raw.Get("event_log_handler")) {
    if (auto word = ParseWord("event_log_handler", *v); !word.ok()) return word.status();
    c.event_log_handler = *v;
  }
  return Status::Ok();
}

Status ApplyRendezvous(const RawOptions& raw, ParsedCommandLine& parsed) {
  LaunchConfig& c = parsed.config;
  if (auto v = raw.Get("nnodes")) {
    if (Status s = ParseNnodes(*v, c); !s.ok()) return s;
  }
  if (auto v = raw.Get("rdzv_backend")) c.rdzv_backend = *v;
  if (c.rdzv_backend == "etcd" || c.rdzv_backend == "etcd-v2") {
    return Unimplemented("--rdzv_backend=" + c.rdzv_backend +
                         " is not supported yet: use static or c10d");
  }
  if (auto b = ParseWord("rdzv_backend", c.rdzv_backend); !b.ok()) return b.status();
  if (auto v = raw.Get("rdzv_endpoint"); v && !v->empty()) {  // "": none, as in torchrun
    if (Status s = CheckEndpoint(*v); !s.ok()) return s;
    c.rdzv_endpoint = *v;
  }
  if (auto v = raw.Get("rdzv_id")) {
    if (Status s = CheckName("--rdzv_id", *v, kMaxNameLength); !s.ok()) return s;
    c.rdzv_id = *v;
  }
  if (auto v = raw.Get("rdzv_conf")) {
    auto conf = ParseRdzvConf(*v, &parsed.warnings);
    if (!conf.ok()) return conf.status();
    c.rdzv_conf = *conf;
  }
  if (auto v = raw.Get("node_rank")) {
    auto n = ParseInt("node_rank", *v, 0, 1 << 20, "a number from 0 to 1048576, below --nnodes");
    if (!n.ok()) return n.status();
    c.node_rank = static_cast<int>(*n);
  }
  std::string addresses[2];
  for (int i : {0, 1}) {
    const char* name = i == 0 ? "master_addr" : "local_addr";
    auto v = raw.Get(name);
    if (!v) continue;
    // An empty --local_addr is not given, as torchrun takes it (--local_addr=$NODE_IP unset).
    if (v->empty() && i == 1) continue;
    // An IPv6 address in brackets, as torchrun's reference gives it ([::1]):
    // the address is what is inside (MASTER_ADDR=::1, as torchrun's workers see).
    addresses[i] = *v;
    if (v->size() > 2 && v->front() == '[' && v->back() == ']' &&
        v->find(':') != std::string::npos) {
      addresses[i] = v->substr(1, v->size() - 2);
    }
    if (!rendezvous::IsHost(addresses[i])) return Bad(name, *v, "a host name or an IP address");
  }
  if (raw.Get("master_addr")) c.master_addr = addresses[0];
  if (auto v = raw.Get("master_port")) {
    auto n = ParseInt("master_port", *v, 0, 65535, "a port number from 0 to 65535");
    if (!n.ok()) return n.status();
    if (*n != 0) c.master_port = static_cast<int>(*n);
  }
  if (!addresses[1].empty()) c.local_addr = addresses[1];
  // torchrun 2.12: --standalone, and a single-node static job without an
  // endpoint or a master port, become c10d on localhost:0 with a random id.
  const bool implicit_standalone = c.rdzv_backend == "static" && c.rdzv_endpoint.empty() &&
                                   !raw.Get("master_port") && c.nnodes_max == 1;
  if (c.standalone || implicit_standalone) {
    // What it replaces, when given: said, not silently dropped.
    for (const char* name :
         {"rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr", "master_port"}) {
      if (auto v = raw.Said(name); v && (c.standalone || std::string(name) == "rdzv_id")) {
        parsed.notices.push_back(
            std::string("--") + name + "=" + *v + " has no effect in a " +
            (c.standalone ? "--standalone" : "single-node") +
            " job, as under torchrun: its store is on localhost at a free port, its run id "
            "random" +
            (c.standalone ? "" : " (give --rdzv_backend=c10d and --rdzv_endpoint to name it)"));
      }
    }
    // torchrun drops a --master_addr there too, without a word: a host name given for the
    // store is said to be unused (attack 108: doctor passed an address the job never used).
    if (auto v = raw.Said("master_addr");
        v && implicit_standalone && !c.standalone && !env::LoopbackName(*v)) {
      parsed.warnings.push_back(raw.SaidAs("master_addr", *v) +
                                " has no effect in a single-node job without --master_port, as "
                                "under torchrun: its store is on localhost at a free port (give "
                                "--master_port too to host it at " +
                                *v + ")");
    }
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    // As torchrun, even an explicit --rdzv_id gives way to a random one; only
    // the one a Slurm step gave (JOB.STEP) is kept, naming the logs by the job.
    if (raw.Said("rdzv_id") || !raw.Get("rdzv_id")) c.rdzv_id = NewRunId();
  }
  if (c.standalone && c.nnodes_max > 1) {
    return Bad("nnodes", raw.Get("nnodes").value_or(""),
               "--standalone is a single-node job: drop --standalone or use --nnodes=1");
  }
  if (c.rdzv_backend == "static" && c.nnodes_min != c.nnodes_max) {
    return Bad("nnodes", raw.Get("nnodes").value_or(""),
               "a fixed N with the static backend; an elastic MIN:MAX needs --rdzv_backend=c10d");
  }
  // torchrun's c10d without an endpoint: the store on localhost (port 29400).
  if (c.rdzv_backend == "c10d" && c.rdzv_endpoint.empty()) c.rdzv_endpoint = "localhost";
  c.node_rank_set = raw.Get("node_rank").has_value();
  if (c.node_rank >= c.nnodes_max) {
    return Bad("node_rank", std::to_string(c.node_rank),
               "a number below --nnodes (" + std::to_string(c.nnodes_max) + ")");
  }
  return Status::Ok();
}

// The GPUs the workers will see, checked against the host before any worker starts.
Status ApplyGpus(const RawOptions& raw, const env::Environ& environ, const HostCounts& host,
                 ParsedCommandLine& parsed) {
  LaunchConfig& c = parsed.config;
  auto option = raw.Get("gpus");
  if (option) {
    if (Status s = ParseGpus(*option); !s.ok()) return s;
  }
  auto visible = env::ResolveVisibleGpus(option, environ, host.gpus);
  if (!visible.ok()) return visible.status();
  c.visible_gpus = std::move(*visible);
  c.gpus = c.visible_gpus.worker_devices;
  for (auto& w : c.visible_gpus.warnings) parsed.warnings.push_back(w);
  return Status::Ok();
}

// --nproc_per_node=gpu (or auto) counts the GPUs the workers will see: in a
// Slurm job that was given none, where nothing else hides them, that is every
// GPU of the host, which Slurm may have given to other jobs (attack 84).
void WarnGpusSlurmDidNotGive(const RawOptions& raw, const env::Environ& environ,
                             ParsedCommandLine& parsed) {
  const LaunchConfig& c = parsed.config;
  const auto v = raw.Get("nproc_per_node");
  if (!v || (*v != "gpu" && *v != "auto") || c.visible_gpus.source != env::VisibleSource::kAll ||
      c.visible_gpus.gpus.empty() || !env::Lookup(environ, env::kSlurmJobId)) {
    return;
  }
  parsed.warnings.push_back(
      "--nproc_per_node=" + *v + " counts every GPU of this host (" +
      std::to_string(c.visible_gpus.gpus.size()) +
      "): this Slurm job was given none (no SLURM_STEP_GPUS or SLURM_JOB_GPUS, no "
      "CUDA_VISIBLE_DEVICES), so other jobs may be using them; ask Slurm for GPUs "
      "(--gpus-per-node=N) or give --nproc_per_node a number");
}

// Workers find their GPU by LOCAL_RANK (or get one each with
// --virtual_local_rank): more workers than visible GPUs is an error where each
// must have its own, and a warning otherwise (a CPU job, or several workers
// per GPU on purpose; torchrun does not check, and NCCL then fails with
// "Duplicate GPU detected" or CUDA with "invalid device ordinal").
Status CheckGpuShare(const RawOptions& raw, ParsedCommandLine& parsed) {
  const LaunchConfig& c = parsed.config;
  const int visible = static_cast<int>(c.visible_gpus.gpus.size());
  if (!c.visible_gpus.checked || c.nproc_per_node <= visible) return Status::Ok();
  const std::string seen = std::to_string(visible) + (visible == 1 ? " GPU is" : " GPUs are") +
                           " visible (" + env::VisibleSourceText(c.visible_gpus) + ")";
  const std::string nproc = "--nproc_per_node=" + std::to_string(c.nproc_per_node);
  if (c.virtual_local_rank && (visible > 0 || c.visible_gpus.source != env::VisibleSource::kAll)) {
    return InvalidArgument(nproc + " with --virtual_local_rank needs one GPU per worker, but " +
                           seen + ": lower --nproc_per_node or make more GPUs visible");
  }
  const auto v = raw.Get("nproc_per_node");
  if (visible == 0 || (v && *v == "cpu")) return Status::Ok();
  const std::string without =
      c.nproc_per_node - 1 == visible
          ? "local rank " + std::to_string(visible) + " has no GPU of its own"
          : "local ranks " + std::to_string(visible) + " to " +
                std::to_string(c.nproc_per_node - 1) + " have no GPU of their own";
  parsed.warnings.push_back(
      nproc + " but " + seen + ": " + without +
      " (cuda:LOCAL_RANK fails with \"invalid device ordinal\"; two "
      "NCCL ranks on one GPU fail with \"Duplicate GPU detected\"); for a CPU job ignore this");
  return Status::Ok();
}

Status ApplyWorkers(const RawOptions& raw, const HostCounts& host, LaunchConfig& c) {
  c.allowed_cpus = host.cpus;
  if (auto v = raw.Get("nproc_per_node")) {
    auto n = ParseNproc(*v, host, c.visible_gpus);
    if (!n.ok()) return n.status();
    c.nproc_per_node = *n;
  }
  if (auto v = raw.Get("max_restarts")) {
    auto n = ParseInt("max_restarts", *v, 0, 1 << 30, "a number from 0 to 1073741824");
    if (!n.ok()) return n.status();
    c.max_restarts = static_cast<int>(*n);
  }
  if (auto v = raw.Get("monitor_interval")) {
    auto d = ParseSeconds("--monitor_interval", *v, /*allow_zero=*/false, Spelling::kPython);
    if (!d.ok()) return d.status();
    c.monitor_interval = d->count();
  }
  // torchrun takes any value from PET_START_METHOD (argparse checks choices
  // only on the command line), and an empty one: it changes nothing here.
  if (auto v = raw.Get("start_method"); v && !v->empty()) {
    if (auto m = ParseWord("start_method", *v); !m.ok()) return m.status();
    c.start_method = *v;
  }
  if (auto v = raw.Get("role")) {
    if (Status s = CheckName("--role", *v, kMaxNameLength); !s.ok()) return s;
    c.role = *v;
  }
  c.exit_timeout = -1;  // not given: the --hang_timeout
  for (auto [name, field] : {std::pair{"hang_timeout", &c.hang_timeout},
                             {"startup_timeout", &c.startup_timeout},
                             {"exit_timeout", &c.exit_timeout}}) {
    if (auto v = raw.Get(name)) {
      auto d = ParseSeconds(std::string("--") + name, *v, /*allow_zero=*/true, Spelling::kPython);
      if (!d.ok()) return d.status();
      *field = d->count();
    }
  }
  if (c.exit_timeout < 0) c.exit_timeout = c.hang_timeout;
  if (auto v = raw.Get("hang_detect")) {
    if (auto d = ParseWord("hang_detect", *v); !d.ok()) return d.status();
    c.hang_detect_output = *v == "output";
    c.hang_detect_torch = *v == "torch";
  }
  if (auto v = raw.Get("threads_per_worker")) {
    auto n =
        ParseInt("threads_per_worker", *v, 1, 1 << 20, "a number of threads from 1 to 1048576");
    if (!n.ok()) return n.status();
    c.threads_per_worker = static_cast<int>(*n);
  }
  return Status::Ok();
}

// --numa_binding (torchrun's modes) or --cpu_binding (ddprun's), not both.
Status ApplyBinding(const RawOptions& raw, LaunchConfig& c) {
  auto numa = raw.Get("numa_binding");
  auto cpu = raw.Get("cpu_binding");
  if (numa) {
    auto m = ParseWord("numa_binding", *numa);
    if (!m.ok()) return m.status();
    // In the order of the table's node|socket|exclusive|core-complex.
    c.binding = std::array{env::BindMode::kNumaNode, env::BindMode::kNumaSocket,
                           env::BindMode::kNumaExclusive, env::BindMode::kNumaCoreComplex}[*m];
  }
  if (cpu) {
    if (auto m = ParseWord("cpu_binding", *cpu); !m.ok()) return m.status();
    if (*cpu != "none" && numa) {
      return InvalidArgument("--numa_binding=" + *numa + " and --cpu_binding=" + *cpu +
                             " both bind workers to CPUs: give one of them");
    }
    if (*cpu == "spread") c.binding = env::BindMode::kSpread;
    if (*cpu == "compact") c.binding = env::BindMode::kCompact;
  }
  return Status::Ok();
}

Status ApplyOutput(const RawOptions& raw, LaunchConfig& c) {
  if (auto v = raw.Get("log_dir")) c.log_dir = *v;
  for (auto [name, field] : {std::pair{"redirects", &c.redirects}, {"tee", &c.tee}}) {
    if (auto v = raw.Get(name)) {
      auto sel = ParseStreams(name, *v, c.nproc_per_node);
      if (!sel.ok()) return sel.status();
      *field = *sel;
    }
  }
  if (auto v = raw.Get("local_ranks_filter")) {
    for (const auto& r : env::SplitList(*v)) {
      auto n = ParseInt("local_ranks_filter", r, 0, c.nproc_per_node - 1, "");
      if (!n.ok()) {
        return Bad("local_ranks_filter", *v,
                   "a comma list of local ranks from 0 to " + std::to_string(c.nproc_per_node - 1));
      }
      c.local_ranks_filter.insert(static_cast<int>(*n));
    }
  }
  if (auto v = raw.Get("stdin")) {
    c.stdin_ranks.clear();
    if (*v == "all") {
      for (int r = 0; r < c.nproc_per_node; ++r) c.stdin_ranks.insert(r);
    } else if (*v == "auto") {
      c.stdin_ranks.insert(0);
    } else if (*v != "none") {
      const std::string accepted = "auto, all, none, or a comma list of local ranks from 0 to " +
                                   std::to_string(c.nproc_per_node - 1);
      for (const auto& r : env::SplitList(*v)) {
        auto n = ParseInt("stdin", r, 0, c.nproc_per_node - 1, "");
        if (!n.ok()) return Bad("stdin", *v, accepted);
        c.stdin_ranks.insert(static_cast<int>(*n));
      }
      if (c.stdin_ranks.empty()) return Bad("stdin", *v, accepted);
    }
  }
  if (auto v = raw.Get("duplicate_stdout_filters")) c.duplicate_stdout_filters = ParseFilters(*v);
  if (auto v = raw.Get("duplicate_stderr_filters")) c.duplicate_stderr_filters = ParseFilters(*v);
  return Status::Ok();
}

Status ApplyShutdown(const RawOptions& raw, const env::Environ& environ,
                     ParsedCommandLine& parsed) {
  LaunchConfig& c = parsed.config;
  const bool in_slurm_job =
      env::Lookup(environ, env::kSlurmStepId) || env::Lookup(environ, env::kSlurmJobId);
  if (auto v = raw.Get("signals_to_handle")) {
    if (Status s = ParseSignals(*v, c); !s.ok()) return s;
    c.signals_given = true;
    // Not trapped, they end ddprun by their default action, and its guardian
    // then kills the workers that meant to checkpoint (attack 84).
    std::string untrapped;
    for (int sig : {SIGUSR1, SIGUSR2}) {
      if (c.handled_signals.count(sig) == 0) {
        untrapped += (untrapped.empty() ? "" : " and ") + supervisor::SignalName(sig);
      }
    }
    if (in_slurm_job && !untrapped.empty()) {
      parsed.warnings.push_back(
          "in a Slurm job, --signals_to_handle leaves out " + untrapped +
          ": Slurm sends these ahead of a time limit or a preemption (sbatch "
          "--signal=USR1@SECONDS, scancel -s USR1), and one that is not handled ends ddprun and "
          "every worker at once; add it to the list to have it passed on to the workers");
    }
  } else {
    // In a Slurm job (a step, or the batch script: `sbatch --signal=B:USR1@30`,
    // `scancel -b -s USR1`), SIGUSR1/SIGUSR2 are meant for the workers (a
    // checkpoint): pass them on, do not die of them.
    if (in_slurm_job) {
      c.signals_to_handle += ",SIGUSR1,SIGUSR2";
    }
    (void)ParseSignals(c.signals_to_handle, c);
  }
  std::optional<std::string> timeout = raw.Get("shutdown_timeout");
  std::string subject = "--shutdown_timeout";
  if (!timeout) {
    timeout = env::Lookup(environ, env::kShutdownTimeout);
    subject = env::kShutdownTimeout;
  }
  if (timeout) {
    auto d = ParseSeconds(subject, *timeout, /*allow_zero=*/true, Spelling::kPython);
    if (!d.ok()) return d.status();
    c.shutdown_timeout = d->count();
  }
  return Status::Ok();
}

Status ApplyOptions(const RawOptions& raw, const env::Environ& environ, const HostCounts& host,
                    ParsedCommandLine& parsed) {
  LaunchConfig& c = parsed.config;
  if (Status s = ApplyFlags(raw, c); !s.ok()) return s;
  if (Status s = ApplyRendezvous(raw, parsed); !s.ok()) return s;
  if (c.rdzv_backend == "c10d" && c.nnodes_max > 1 &&
      raw.Get("rdzv_endpoint").value_or("").empty()) {
    parsed.warnings.push_back(
        "no --rdzv_endpoint: the rendezvous store is on localhost:29400, as in torchrun, which "
        "only agents on this host reach; give every node --rdzv_endpoint=HOST[:PORT] of one of "
        "them");
  }
  if (Status s = ApplyUnsupported(raw); !s.ok()) return s;
  if (Status s = ApplyEventLog(raw, c); !s.ok()) return s;
  if (Status s = ApplyGpus(raw, environ, host, parsed); !s.ok()) return s;
  if (Status s = ApplyWorkers(raw, host, c); !s.ok()) return s;
  if (Status s = CheckGpuShare(raw, parsed); !s.ok()) return s;
  WarnGpusSlurmDidNotGive(raw, environ, parsed);
  c.gpu_bus_ids = env::LocalRankBusIds(c.visible_gpus, host.gpus, c.nproc_per_node);
  if (Status s = ApplyBinding(raw, c); !s.ok()) return s;
  if (Status s = ApplyOutput(raw, c); !s.ok()) return s;
  if (Status s = ApplyShutdown(raw, environ, parsed); !s.ok()) return s;
  NoteIneffective(raw, parsed);
  return CheckCombinations(environ, parsed);
}

}  // namespace

StatusOr<std::string> LogLevelName(const env::Environ& environ) {
  const std::string level = env::Lookup(environ, env::kLogLevel).value_or("");
  if (level.empty()) return std::string("info");
  auto i = ParseChoice(env::kLogLevel, level,
                       {"TRACE", "DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "OFF"},
                       /*ignore_case=*/true);
  if (!i.ok()) return i.status();
  static const char* const kSpdlogNames[] = {"trace",   "debug", "info",     "warning",
                                             "warning", "error", "critical", "off"};
  return std::string(kSpdlogNames[*i]);
}

StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const env::Environ& environ, const HostCounts& host) {
  auto split = SplitCommandLine(args);
  if (!split.ok()) return split.status();
  ParsedCommandLine parsed;
  if (split->values.count("help") != 0) {
    parsed.action = Action::kHelp;
    return parsed;
  }
  if (split->values.count("version") != 0) {
    parsed.action = Action::kVersion;
    return parsed;
  }
  if (auto shell = split->values.find("print_completion"); shell != split->values.end()) {
    auto i = ParseWord("print_completion", shell->second);
    if (!i.ok()) return i.status();
    parsed.action = Action::kPrintCompletion;
    parsed.completion_shell = std::array{Shell::kBash, Shell::kZsh}[*i];  // the table's bash|zsh
    return parsed;
  }
  RawOptions raw(split->values, environ);
  if (Status s = ApplySlurm(raw, environ, parsed); !s.ok()) return s;
  if (Status s = ApplyOptions(raw, environ, host, parsed); !s.ok()) {
    return raw.NameEnvironmentSource(s);
  }
  std::set<std::string> told;  // the first value replaced, once per option
  for (const auto& [name, first] : split->replaced) {
    if (!told.insert(name).second) continue;
    if (auto warning = RepeatedOptionWarning(name, first, split->values.at(name))) {
      parsed.warnings.push_back(std::move(*warning));
    }
  }
  // The agent reads --rdzv_conf when it starts; a bad key is a usage error
  // before any directory, store or worker is made.
  std::vector<std::string> conf_notices;
  if (auto s = SettingsFromConfig(parsed.config, environ, &conf_notices); !s.ok()) {
    return s.status();
  }
  for (const auto& [key, value] : parsed.config.rdzv_conf) {
    if (auto unknown = UnknownConfKey(key, value)) parsed.warnings.push_back(*unknown);
  }
  if (!split->program) {
    return InvalidArgument(
        "no program to run: give one after the options, e.g. "
        "ddprun --nproc_per_node=2 ./train or ddprun train.py");
  }
  if (split->program->empty()) {
    return InvalidArgument(
        "the program is an empty argument (an unset variable, as in ddprun \"$SCRIPT\"?): give "
        "the program to run after the options");
  }
  parsed.config.program = *split->program;
  parsed.config.program_args = split->program_args;
  CheckProgram(parsed);
  return parsed;
}

}  // namespace ddprun::launcher
