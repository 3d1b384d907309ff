// ddprun: a torchrun-compatible launcher and supervisor.
//
// main reads as the launcher's lifecycle: parse the command line, resolve
// the program, run the agent, map the outcome to an exit code.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "base/exit_codes.hpp"
#include "env/cpus.hpp"
#include "env/environ.hpp"
#include "env/gloo_address.hpp"
#include "env/gpus.hpp"
#include "env/host.hpp"
#include "env/interfaces.hpp"
#include "env/limits.hpp"
#include "env/names.hpp"
#include "env/slurm.hpp"
#include "launcher/agent.hpp"
#include "launcher/completion.hpp"
#include "launcher/cpu_binding.hpp"
#include "launcher/doctor.hpp"
#include "launcher/dump_request.hpp"
#include "launcher/inherited_signals.hpp"
#include "launcher/job_stores.hpp"
#include "launcher/machine_reports.hpp"
#include "launcher/option_table.hpp"
#include "launcher/options.hpp"
#include "launcher/program.hpp"
#include "launcher/slurm_options.hpp"
#include "launcher/start_failure.hpp"
#include "launcher/uncaught.hpp"
#include "rendezvous/store_client.hpp"
#include "supervisor/console.hpp"
#include "supervisor/containment.hpp"
#include "supervisor/late_signals.hpp"
#include "supervisor/self_exec.hpp"
#include "supervisor/supervisor.hpp"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "0.0.0"
#endif

namespace {

// Opens /dev/null on each of fds 0-2 that is closed (`ddprun ... >&-`): else
// the next file ddprun opens takes the number, its console writes go there,
// and libuv refuses to close it (an abort). Returns the names of those closed.
std::vector<std::string> OpenClosedStandardFds() {
  std::vector<std::string> closed;
  const char* names[] = {"stdin", "stdout", "stderr"};
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free number: fd itself, as those below it are open.
    const int opened = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened != fd && opened >= 0) {
      dup2(opened, fd);
      close(opened);
    }
    closed.emplace_back(names[fd]);
  }
  return closed;
}

// At exit, how long a console that does not read may hold back the launcher.
constexpr std::chrono::milliseconds kConsoleFlushWait{5000};

ddprun::Status SetUpLogging(const ddprun::env::Environ& environ) {
  // Through the console writer: a stderr nobody reads never blocks the launcher.
  auto logger = std::make_shared<spdlog::logger>("ddprun", ddprun::supervisor::ConsoleLogSink());
  logger->set_pattern("%^[ddprun %H:%M:%S %l]%$ %v");
  auto level = ddprun::launcher::LogLevelName(environ);
  if (!level.ok()) return level.status();
  logger->set_level(spdlog::level::from_str(*level));
  spdlog::set_default_logger(logger);
  return ddprun::Status::Ok();
}

void WarnFailedChecks(const std::vector<ddprun::env::LimitCheck>& checks) {
  for (const auto& check : checks) {
    if (check.status == ddprun::env::CheckStatus::kOk) continue;
    spdlog::warn("{}: {}; fix: {}", check.check, check.measured, check.fix);
  }
}

// Raises the soft limits the job needs and logs what changed and what looks
// short; fails (before any worker starts) when RLIMIT_NPROC cannot be raised enough.
ddprun::Status PrepareLimits(const ddprun::launcher::LaunchConfig& c,
                             const ddprun::env::Environ& environ,
                             const ddprun::env::GpuInventory& host_gpus) {
  const int gpus = ddprun::env::GpusSeen(c.visible_gpus, host_gpus);
  auto plan = ddprun::env::PrepareLimits({c.nproc_per_node, c.threads_per_worker, gpus}, environ);
  if (!plan.ok()) return plan.status();
  for (const auto& note : plan->debug_notes) spdlog::debug("{}", note);
  for (const auto& notice : plan->notices) spdlog::info("{}", notice);
  WarnFailedChecks(plan->checks);
  return ddprun::Status::Ok();
}

// GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME, as the workers get them, against
// this host's interfaces: a wrong one fails every worker's init_process_group,
// only after the program's own start-up. A warning, not a refusal: the
// program may set its own before it starts a process group.
void CheckSocketInterfaces(const ddprun::launcher::LaunchConfig& c,
                           const ddprun::env::Environ& environ,
                           const ddprun::env::GpuInventory& host_gpus) {
  namespace env = ddprun::env;
  const std::vector<env::NetInterface> interfaces = env::ListInterfaces();
  WarnFailedChecks(env::SocketInterfaceChecks(environ, interfaces, env::ListIbDevices(),
                                              env::GpusSeen(c.visible_gpus, host_gpus)));
  // Several hosts: would a PyTorch worker's Gloo tell the others a loopback address?
  const bool gloo_ifname_set = env::Lookup(environ, env::kGlooSocketIfname).value_or("").size() > 1;
  if (!gloo_ifname_set && ddprun::launcher::NodesMaySpanHosts(c)) {
    const std::string host = env::Hostname();
    WarnFailedChecks({env::GlooAddressCheck(host, env::GlooDefaultAddress(host), interfaces,
                                            gloo_ifname_set, /*multi_node=*/true)});
  }
}

// In a step, what the cluster's configuration tells: the proctrack plugin
// (whether Slurm's signals reach the workers itself), and KillWait: Slurm
// SIGKILLs a step KillWait seconds after its SIGTERM (scancel, time limit), so
// a longer grace would be cut short.
void ReadSlurmConfig(ddprun::launcher::LaunchConfig& c) {
  if (!c.slurm) return;
  const ddprun::env::SlurmConfig config = ddprun::env::ReadSlurmConfig();
  c.slurm_proctrack = config.proctrack;
  if (!config.unread.empty()) {
    spdlog::info(
        "Slurm's configuration was not read ({}): --shutdown_timeout is not checked against its "
        "KillWait, and ddprun forwards every signal to the workers itself (they get SIGUSR1 twice "
        "where Slurm's proctrack reaches them too)",
        config.unread);
  }
  const std::optional<int>& kill_wait = config.kill_wait;
  if (!kill_wait || c.shutdown_timeout <= *kill_wait) return;
  spdlog::warn(
      "--shutdown_timeout={} is longer than Slurm's KillWait ({} s, scontrol show config): at "
      "scancel or the time limit Slurm kills every process of the step {} s after its SIGTERM, "
      "before ddprun's grace ends; give --shutdown_timeout={} or less (or ask for a larger "
      "KillWait)",
      c.shutdown_timeout, *kill_wait, *kill_wait, *kill_wait);
}

// --numa_binding / --cpu_binding: each local rank's CPUs, planned once for
// the job and logged in one line.
ddprun::Status BindCpus(ddprun::launcher::LaunchConfig& c) {
  if (c.binding == ddprun::env::BindMode::kNone) return ddprun::Status::Ok();
  // Each local rank near its GPU (local rank i drives the i-th visible GPU), where known.
  auto plan = ddprun::launcher::PlanWorkerCpus(c, c.gpu_bus_ids);
  if (!plan.ok()) return plan.status();
  for (const auto& note : plan->notes)
    spdlog::info("{}: {}", ddprun::env::BindModeName(c.binding), note);
  for (const auto& warning : plan->warnings) spdlog::warn("{}", warning);
  spdlog::info("{}: {}", ddprun::env::BindModeName(c.binding), ddprun::env::DescribePlan(*plan));
  c.worker_cpus = std::move(plan->ranks);
  return ddprun::Status::Ok();
}

// Prints `text` for a command that only prints (help, version, doctor) and
// returns `code`, or 74 when stdout took it only in part (a full disk,
// /dev/full); a reader that went away (`| head`) is no error.
int Print(const std::string& text, int code) {
  const bool written =
      std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0;
  const int err = errno;
  if (written || err == EPIPE) return code;
  std::fprintf(stderr, "ddprun: writing to its stdout: %s: the text is incomplete; exit code 74\n",
               std::strerror(err));
  return ddprun::exit_code::kLogLost;
}

// ddprun doctor [--json]: prints the table (or its JSON, launcher/machine_reports.hpp);
// 0 when nothing fails, 1 otherwise, 2 on bad options.
int Doctor(std::vector<std::string> options, const ddprun::env::Environ& environ,
           const ddprun::launcher::HostCounts& host) {
  using ddprun::launcher::DoctorJson;
  using ddprun::launcher::DoctorUsageErrorJson;
  using ddprun::launcher::JsonText;
  // Given twice is given, as argparse takes a repeated flag.
  const auto end = std::find(options.begin(), options.end(), "--");
  const auto json = std::remove(options.begin(), end, "--json");
  const bool as_json = json != end;
  options.erase(json, end);
  const auto program = std::find(options.begin(), options.end(), "--");
  // A refusal goes to stderr, and with --json also to stdout as a document
  // (docs/schemas/doctor.schema.json), for a script that reads only stdout.
  const auto refuse = [&](const std::string& message) {
    std::fprintf(stderr, "ddprun doctor: %s\n", message.c_str());
    if (!as_json) return ddprun::exit_code::kUsage;
    return Print(JsonText(DoctorUsageErrorJson(ddprun::env::Hostname(), message)),
                 ddprun::exit_code::kUsage);
  };
  for (auto it = options.begin(); it != program; ++it) {
    if (it->rfind("--json=", 0) == 0) {
      return refuse(*it + ": --json takes no value: give --json alone to print the checks as JSON");
    }
  }
  auto report = ddprun::launcher::RunDoctor(options, environ, host);
  if (!report.ok()) return refuse(report.status().message());
  const int code = report->failed ? 1 : 0;
  if (as_json) {
    return Print(JsonText(DoctorJson(report->host, report->nproc_per_node,
                                     report->threads_per_worker, report->checks, report->failed)),
                 code);
  }
  return Print(report->text, code);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun;  // NOLINT: main only
  const std::vector<std::string> closed_fds = OpenClosedStandardFds();
  // Before any handler exists: what the caller left ignored (nohup: SIGHUP).
  const std::set<int> ignored_at_start = supervisor::IgnoredSignals();
  // A write past the file size limit (ulimit -f: a log file, the event log)
  // then fails with EFBIG, which the writer reports, instead of killing
  // ddprun and orphaning its output; workers get SIGXFSZ's default again.
  signal(SIGXFSZ, SIG_IGN);
  // A write to a reader that is gone (the guardian's pipe, a console piped to
  // head) fails with EPIPE, which the writer handles, instead of killing
  // ddprun; workers get SIGPIPE's default again too.
  signal(SIGPIPE, SIG_IGN);
  // `ddprun dump` sent to a ddprun that supervises nothing yet (or a doctor)
  // is not its death: the supervisor catches the signal once it can dump.
  signal(launcher::DumpSignal(), SIG_IGN);
  launcher::InstallUncaughtHandler();
  supervisor::RememberArgumentCount(argc);  // the guardian runs as ddprun was run
  if (argc >= 2 && std::string(argv[1]) == supervisor::kGuardianArg) {
    return supervisor::RunGuardian(argc, argv);
  }
  const env::Environ environ = env::CurrentEnviron();
  if (Status s = SetUpLogging(environ); !s.ok()) {
    std::fprintf(stderr, "ddprun: %s\n", s.message().c_str());
    return ddprun::exit_code::kUsage;
  }
  // What was logged goes out through the console writer's thread: every way
  // out of main waits for it (an early exit lost its last lines otherwise).
  struct FlushAtReturn {
    bool done = false;  // the run's own end flushed it
    ~FlushAtReturn() {
      if (!done) supervisor::FlushConsole(kConsoleFlushWait, /*wait_for_unkept=*/true);
    }
  } flush_at_return;
  rendezvous::StoreClient::set_not_up_notice(
      [](const std::string& address, double waited_s, double left_s) {
        spdlog::warn(
            "the rendezvous store at {} is not up yet (nothing listens there) after {:.0f} s: "
            "its host (node rank 0, or the c10d endpoint's agent) has not started, or the "
            "address is wrong; waiting {:.0f} s more (the join timeout: --rdzv_conf "
            "timeout=SECONDS for the static backend, read_timeout for c10d)",
            address, waited_s, left_s);
      });
  rendezvous::StoreClient::set_slow_handshake_notice(
      [](const std::string& address, double waited_s, double limit_s) {
        spdlog::warn(
            "the store at {} took this agent's connection but has not answered for {:.0f} s: "
            "the agent hosting it may be stopped (SIGSTOP, a debugger) or starved; waiting up to "
            "{:.0f} s for it (--rdzv_conf read_timeout)",
            address, waited_s, limit_s);
      });
  std::vector<std::string> args(argv + 1, argv + argc);
  launcher::HostCounts host{env::AllowedCpuCount(environ),
                            env::DiscoverGpus(env::DiscoveryPaths(environ))};
  if (auto doctor = launcher::DoctorArguments(args)) {
    if (!launcher::DoctorOnlyPrints(*doctor)) return Doctor(*doctor, environ, host);
    // --help, --version: printed below, as without the doctor.
    args.clear();
    std::copy_if(doctor->begin(), doctor->end(), std::back_inserter(args),
                 [](const std::string& a) { return a != "--json"; });
  }
  if (auto dumped = launcher::MaybeRequestDump(args)) return *dumped;
  auto parsed = launcher::ParseCommandLine(args, environ, host);
  if (!parsed.ok()) {
    std::fprintf(stderr, "ddprun: %s\n", parsed.status().message().c_str());
    return ddprun::exit_code::kUsage;
  }
  if (parsed->action == launcher::Action::kHelp) {
    return Print(launcher::HelpText(), 0);
  }
  if (parsed->action == launcher::Action::kVersion) {
    return Print(std::string("ddprun ") + DDPRUN_VERSION + "\n", 0);
  }
  if (parsed->action == launcher::Action::kPrintCompletion) {
    return Print(launcher::CompletionScript(parsed->completion_shell), 0);
  }
  for (const auto& name : closed_fds) {
    spdlog::warn("ddprun's {} was closed: /dev/null stands in for it, for ddprun and the workers",
                 name);
  }
  for (const auto& notice : parsed->notices) spdlog::info("{}", notice);
  for (const auto& notice : launcher::KeepSignalsIgnored(ignored_at_start, parsed->config)) {
    spdlog::info("{}", notice);
  }
  for (const auto& warning : parsed->warnings) spdlog::warn("{}", warning);
  // What stops this node before its agent joins: said, and told to the other
  // nodes, which would otherwise wait for it until their join_timeout.
  auto cannot_start = [&](const std::string& why, int code) {
    std::fprintf(stderr, "ddprun: %s\n", why.c_str());
    launcher::TellJobOfStartFailure(parsed->config, environ, why, code);
    return code;
  };
  if (Status s = launcher::CheckWorkingDirectory(environ); !s.ok()) {
    return cannot_start(s.message(), exit_code::ForStatus(s));
  }
  auto program = launcher::ResolveProgram(parsed->config, environ);
  if (!program.ok()) {
    std::string why = "cannot run " + parsed->config.program + ": " + program.status().message();
    const std::string& name = parsed->config.program;
    if ((name == "doctor" || name == "dump") && program.status().code() == StatusCode::kNotFound) {
      // ddprun --nproc_per_node=2 doctor: a subcommand after options (attack 99).
      why += std::string("; ddprun's ") + name + " is a subcommand, read only as the first " +
             "argument: ddprun " + name +
             (name == "doctor" ? " [options] (or --doctor)" : " [PID]");
    }
    return cannot_start(why, exit_code::ForStatus(program.status()));
  }
  if (!program->interpreter.empty()) {
    spdlog::info("workers run {} under {} (from {})", parsed->config.program, program->interpreter,
                 program->interpreter_source);
  }
  if (Status s = PrepareLimits(parsed->config, environ, host.gpus); !s.ok()) {
    return cannot_start(s.message(), exit_code::ForStatus(s));
  }
  CheckSocketInterfaces(parsed->config, environ, host.gpus);
  ReadSlurmConfig(parsed->config);
  if (auto said = launcher::ResolveSlurmStoreHost(parsed->config); !said.ok()) {
    std::fprintf(stderr, "ddprun: %s\n", said.status().message().c_str());
    return exit_code::ForStatus(said.status());
  } else if (!said->empty()) {
    spdlog::info("{}", *said);
  }
  if (Status s = BindCpus(parsed->config); !s.ok()) {
    return cannot_start(s.message(), exit_code::ForStatus(s));
  }
  const int code = launcher::RunAgent(parsed->config, *program, environ);
  // Workers are gone; what the console has not taken yet gets written while
  // it reads. One that does not is given up after kConsoleFlushWait where log
  // files keep what it holds, or ddprun was told to stop (a signal), and
  // waited for where nothing else keeps it.
  supervisor::FlushConsole(kConsoleFlushWait,
                           /*wait_for_unkept=*/supervisor::TerminatingSignalsReceived() == 0);
  flush_at_return.done = true;
  // Output lost there is lost for good (a log file may keep a copy): said, and
  // a job that succeeded exits as for an incomplete log file.
  int final_code = code;
  for (const std::string& failed : supervisor::FailedConsoles()) {
    std::fprintf(stderr,
                 "ddprun: writing to its %s: what the workers wrote to it from then on is "
                 "lost%s\n",
                 failed.c_str(), code == 0 ? "; exit code 74" : "");
    if (code == 0) final_code = exit_code::kLogLost;
  }
  return final_code;
}
