#include "launcher/doctor.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>

#include "base/command.hpp"
#include "env/gloo_address.hpp"
#include "env/host.hpp"
#include "env/interfaces.hpp"
#include "env/memory.hpp"
#include "env/names.hpp"
#include "env/openblas.hpp"
#include "env/slurm.hpp"
#include "env/worker_env.hpp"
#include "launcher/doctor_gpus.hpp"
#include "launcher/doctor_job.hpp"
#include "launcher/job_stores.hpp"
#include "launcher/option_table.hpp"
#include "launcher/slurm_options.hpp"
#include "rendezvous/sockets.hpp"

namespace ddprun::launcher {

using env::CheckStatus;
using env::LimitCheck;

std::optional<std::vector<std::string>> DoctorArguments(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "doctor") {
    return std::vector<std::string>(args.begin() + 1, args.end());
  }
  // --json is the doctor's own option, not the launcher's: set aside first.
  std::vector<std::string> rest;
  const bool json = std::count(args.begin(), args.end(), "--json") > 0;
  std::copy_if(args.begin(), args.end(), std::back_inserter(rest),
               [](const std::string& a) { return a != "--json"; });
  auto split = SplitCommandLine(rest);
  const auto is_doctor = [](const std::string& a) {
    return a == "--doctor" || a.rfind("--doctor=", 0) == 0;
  };
  if (!split.ok()) {
    // The doctor refuses the options as the launch would, in its own form
    // (with --json, a document): `ddprun --doctor --json --bogus` said
    // "unknown option --json".
    const auto end = std::find(args.begin(), args.end(), "--");
    if (std::none_of(args.begin(), end, is_doctor)) return std::nullopt;
    std::vector<std::string> options;
    std::copy_if(args.begin(), args.end(), std::back_inserter(options),
                 [&](const std::string& a) { return !is_doctor(a); });
    return options;
  }
  std::vector<std::string> options;
  if (json) options.push_back("--json");
  bool doctor = false;
  for (const auto& arg : split->launcher) {
    if (is_doctor(arg)) {
      doctor = true;
    } else {
      options.push_back(arg);
    }
  }
  if (!doctor) return std::nullopt;
  // The job's program, checked as the launch would (it was dropped unread).
  if (split->program) {
    options.push_back("--");
    options.push_back(*split->program);
    options.insert(options.end(), split->program_args.begin(), split->program_args.end());
  }
  return options;
}

bool DoctorOnlyPrints(const std::vector<std::string>& options) {
  std::vector<std::string> rest;
  std::copy_if(options.begin(), options.end(), std::back_inserter(rest),
               [](const std::string& a) { return a != "--json"; });
  auto split = SplitCommandLine(rest);
  if (!split.ok()) return false;
  for (const char* name : {"help", "version", "print_completion"}) {
    if (split->values.count(name) != 0) return true;
  }
  return false;
}

namespace {

// ---------------------------------------------------------------------------
// NCCL and CUDA versions, from the libraries a worker would load.

using Library = std::unique_ptr<void, int (*)(void*)>;

Library Open(const std::vector<const char*>& names, std::string& found) {
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_LAZY | RTLD_LOCAL)) {
      found = name;
      return Library(h, dlclose);
    }
  }
  return Library(nullptr, dlclose);
}

// Calls `int symbol(int*)` (ncclGetVersion, cuDriverGetVersion,
// cudaRuntimeGetVersion: 0 is success in all three).
std::optional<int> VersionFrom(const std::vector<const char*>& libraries, const char* symbol,
                               std::string& found) {
  Library lib = Open(libraries, found);
  if (!lib) return std::nullopt;
  auto fn = reinterpret_cast<int (*)(int*)>(dlsym(lib.get(), symbol));
  int version = 0;
  if (fn == nullptr || fn(&version) != 0) return std::nullopt;
  return version;
}

LimitCheck NcclCheck() {
  std::string lib;
  auto v = VersionFrom({"libnccl.so.2", "libnccl.so"}, "ncclGetVersion", lib);
  if (!v) {
    return {"NCCL", CheckStatus::kOk,
            "not found (libnccl.so.2 is not on the library path; PyTorch wheels bring their own)",
            ""};
  }
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 before.
  const int major = *v >= 10000 ? *v / 10000 : *v / 1000;
  const int minor = *v >= 10000 ? (*v % 10000) / 100 : (*v % 1000) / 100;
  return {"NCCL", CheckStatus::kOk,
          std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(*v % 100) +
              " (" + lib + ")",
          ""};
}

// The kernels the system's OpenBLAS runs here (env/openblas.hpp): a warning
// when they are older than the CPU (a CPU model it does not know).
LimitCheck OpenBlasCheck() {
  // Its thread pool starts as it loads: one thread, not one per CPU, in ddprun.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  std::string lib;
  Library blas = Open({"libopenblas.so.0", "libopenblas.so"}, lib);
  auto corename =
      blas ? reinterpret_cast<char* (*)()>(dlsym(blas.get(), "openblas_get_corename")) : nullptr;
  auto config =
      blas ? reinterpret_cast<char* (*)()>(dlsym(blas.get(), "openblas_get_config")) : nullptr;
  if (corename == nullptr) {
    return {"OpenBLAS", CheckStatus::kOk, "not found (libopenblas.so.0 is not on the library path)",
            ""};
  }
  const std::string version = env::OpenBlasVersion(config != nullptr ? config() : "OpenBLAS");
  const std::string core = corename();
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  const std::string by =
      chosen != nullptr ? "OPENBLAS_CORETYPE=" + std::string(chosen) : "its choice";
  const std::string better = env::BetterOpenBlasCore(core, env::ThisCpusVectorUnits());
  if (better.empty()) {
    return {"OpenBLAS", CheckStatus::kOk,
            version + ", " + core + " kernels (" + by + "; " + lib + ")", ""};
  }
  return {"OpenBLAS", CheckStatus::kWarn,
          version + ", " + core + " kernels (" + by + "; " + lib +
              "): no AVX2 on a CPU that has it" +
              (chosen == nullptr ? " (OpenBLAS does not know this CPU model)" : ""),
          "export OPENBLAS_CORETYPE=" + better +
              " for workers whose GEMMs are OpenBLAS's (C++ workers, NumPy on the system's "
              "OpenBLAS; not PyTorch's own): GEMMs without AVX2 run 2-3x slower"};
}

std::string CudaVersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::vector<LimitCheck> CudaChecks(bool have_gpus) {
  std::string lib;
  std::vector<LimitCheck> out;
  auto driver = VersionFrom({"libcuda.so.1", "libcuda.so"}, "cuDriverGetVersion", lib);
  if (driver) {
    out.push_back({"CUDA driver", CheckStatus::kOk,
                   "supports CUDA " + CudaVersionText(*driver) + " (" + lib + ")", ""});
  } else {
    out.push_back({"CUDA driver", have_gpus ? CheckStatus::kWarn : CheckStatus::kOk,
                   "libcuda.so.1 not found",
                   have_gpus ? "install the NVIDIA driver's user-space libraries" : ""});
  }
  auto runtime =
      VersionFrom({"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"},
                  "cudaRuntimeGetVersion", lib);
  out.push_back({"CUDA runtime", CheckStatus::kOk,
                 runtime ? CudaVersionText(*runtime) + " (" + lib + ")"
                         : "libcudart not found (PyTorch wheels bring their own)",
                 ""});
  return out;
}

// ---------------------------------------------------------------------------
// Network interfaces and ports.

// Every interface, then the network variables (GLOO_SOCKET_IFNAME,
// NCCL_SOCKET_IFNAME against them, NCCL_IB_HCA against the InfiniBand devices).
std::vector<LimitCheck> InterfaceChecks(const env::Environ& environ, int gpus) {
  std::vector<LimitCheck> out;
  const std::vector<env::NetInterface> interfaces = env::ListInterfaces();
  bool reachable = false;
  for (const auto& iface : interfaces) {
    const bool up = (iface.flags & IFF_UP) != 0 && (iface.flags & IFF_RUNNING) != 0;
    if (up && (iface.flags & IFF_LOOPBACK) == 0 && !iface.addresses.empty()) reachable = true;
    std::string addresses;
    for (const auto& a : iface.addresses) addresses += ", " + a.text;
    out.push_back(
        {"interface " + iface.name, CheckStatus::kOk,
         std::string(up ? "up" : "down") + (addresses.empty() ? ", no address" : addresses), ""});
  }
  if (!reachable) {
    out.push_back({"network", CheckStatus::kWarn,
                   "no interface but loopback is up with an address: other nodes cannot reach "
                   "this one",
                   "single-node jobs only; for multi-node bring up an interface"});
  }
  for (auto& check : env::SocketInterfaceChecks(environ, interfaces, env::ListIbDevices(), gpus))
    out.push_back(check);
  return out;
}

// Binds 0.0.0.0:port as the store does (SO_REUSEADDR); returns the bound port or errno.
std::pair<int, int> TryBind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {0, errno};
  std::unique_ptr<int, void (*)(int*)> guard(&fd, [](int* f) { close(*f); });
  int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {0, errno};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {0, errno};
  return {ntohs(addr.sin_port), 0};
}

// `needed`: this node's job cannot start without it (its own store's port).
LimitCheck PortCheck(int port, const std::string& what, const std::string& option,
                     bool needed = false) {
  const std::string name = "port " + std::to_string(port);
  auto [bound, err] = TryBind(port);
  if (err == 0) return {name, CheckStatus::kOk, "free (" + what + ")", ""};
  return {name, needed ? CheckStatus::kFail : CheckStatus::kWarn,
          "cannot bind: " + std::string(std::strerror(err)) + " (" + what + ")",
          "pick another with " + option +
              ", or find the holder: ss -ltnp 'sport = :" + std::to_string(port) + "'"};
}

std::vector<LimitCheck> PortChecks(const LaunchConfig& c) {
  std::vector<LimitCheck> out;
  auto [port, err] = TryBind(0);
  if (err == 0) {
    out.push_back({"port 0", CheckStatus::kOk,
                   "bound ephemeral port " + std::to_string(port) + " (single-node jobs use one)",
                   ""});
  } else {
    out.push_back({"port 0", CheckStatus::kFail,
                   "cannot bind a TCP port: " + std::string(std::strerror(err)),
                   "ddprun's rendezvous store needs a local TCP port: check the network "
                   "namespace and seccomp/firewall rules"});
  }
  // Node rank 0 of a static job given --master_port hosts the store there: a
  // port held by another process fails its start.
  // A c10d job given its endpoint uses that port, not the defaults.
  std::string host;
  int c10d_port = 29400;
  if (c.rdzv_backend == "c10d" && !c.rdzv_endpoint.empty() &&
      rendezvous::SplitHostPort(c.rdzv_endpoint, 29400, &host, &c10d_port).ok() &&
      c10d_port != 0) {  // 0: a single-node job's store, on the ephemeral port above
    out.push_back(
        PortCheck(c10d_port, "c10d rendezvous --rdzv_endpoint port", "--rdzv_endpoint=HOST:PORT"));
    return out;
  }
  // A static job's --rdzv_endpoint, when given, is where its store is (as the launch reads it).
  const bool endpoint = c.rdzv_backend == "static" && !c.rdzv_endpoint.empty();
  int static_port = c.master_port.value_or(29500);
  if (endpoint && !StaticStoreAddress(c, &host, &static_port).ok()) {
    static_port = c.master_port.value_or(29500);  // said by the launch's own check of it
  }
  const bool hosts_store =
      (c.master_port || endpoint) && c.rdzv_backend == "static" && c.node_rank == 0;
  const std::string option = StaticPortOption(c);
  out.push_back(PortCheck(
      static_port,
      hosts_store ? "this node's rendezvous store, " + option : "static rendezvous " + option,
      option == "--rdzv_endpoint" ? "--rdzv_endpoint=HOST:PORT" : "--master_port", hosts_store));
  out.push_back(PortCheck(29400, "c10d rendezvous default", "--rdzv_endpoint=HOST:PORT"));
  return out;
}

// ---------------------------------------------------------------------------
// Slurm, and the rendezvous endpoint other nodes will use.

std::string SecondsText(double s) {
  std::ostringstream o;
  o << s << " s";
  return o.str();
}

std::vector<LimitCheck> SlurmChecks(const LaunchConfig& c, const env::Environ& environ) {
  std::vector<LimitCheck> out;
  if (!c.slurm) {
    auto job = env::Lookup(environ, env::kSlurmJobId);
    if (!job) return {{"slurm", CheckStatus::kOk, "not in a Slurm job", ""}};
    out.push_back({"slurm", CheckStatus::kWarn,
                   "job " + *job + " but not a job step: Slurm mode is off",
                   "run ddprun (and ddprun doctor) with srun --ntasks-per-node=1 so that it "
                   "reads the step"});
    return out;
  }
  const env::SlurmStep& step = *c.slurm;
  out.push_back(
      {"slurm step", CheckStatus::kOk,
       step.Id() + ", node " + std::to_string(step.node_id) + " of " +
           std::to_string(step.num_nodes) + " (" + step.nodelist + "), " +
           (step.node_name.empty() ? "" : "SLURMD_NODENAME " + step.node_name + ", ") +
           std::to_string(step.TasksOnThisNode()) + " agent(s) on this node" +
           (step.restart_count > 0 ? ", requeued " + std::to_string(step.restart_count) + " time(s)"
                                   : ""),
       ""});
  out.push_back(
      {"slurm cpus", CheckStatus::kOk,
       "SLURM_CPUS_ON_NODE=" + env::Lookup(environ, env::kSlurmCpusOnNode).value_or("(unset)") +
           ", allowed CPUs " + std::to_string(c.allowed_cpus) + ", " +
           std::to_string(c.nproc_per_node) + " worker(s)",
       ""});
  std::string gpus;
  for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", env::kCudaVisibleDevices}) {
    if (auto v = env::Lookup(environ, name)) {
      gpus += (gpus.empty() ? "" : ", ") + std::string(name) + "=" + *v;
    }
  }
  if (gpus.empty() && !c.visible_gpus.gpus.empty()) {
    // Nothing hides the host's GPUs from a job Slurm gave none: the workers
    // would see (and --nproc_per_node=gpu count) other jobs' GPUs.
    out.push_back({"slurm gpus", CheckStatus::kWarn,
                   "none allocated, and the workers see all " +
                       std::to_string(c.visible_gpus.gpus.size()) + " GPUs of this host",
                   "ask Slurm for GPUs (--gpus-per-node=N): other jobs may be using these"});
  } else {
    out.push_back({"slurm gpus", CheckStatus::kOk, gpus.empty() ? "none allocated" : gpus, ""});
  }
  const env::SlurmConfig config = env::ReadSlurmConfig();
  const std::optional<int>& kill_wait = config.kill_wait;
  if (!kill_wait) {
    out.push_back(
        {"slurm KillWait", CheckStatus::kWarn,
         "unknown (" +
             (config.unread.empty() ? "scontrol show config did not say" : config.unread) + ")",
         "check that --shutdown_timeout is not above the cluster's KillWait"});
  } else if (c.shutdown_timeout > *kill_wait) {
    out.push_back({"slurm KillWait", CheckStatus::kWarn,
                   std::to_string(*kill_wait) + " s, below --shutdown_timeout " +
                       SecondsText(c.shutdown_timeout),
                   "give --shutdown_timeout=" + std::to_string(*kill_wait) +
                       " or less: Slurm kills the step KillWait after its SIGTERM"});
  } else {
    out.push_back({"slurm KillWait", CheckStatus::kOk,
                   std::to_string(*kill_wait) + " s, covers --shutdown_timeout " +
                       SecondsText(c.shutdown_timeout),
                   ""});
  }
  return out;
}

// Multi-node jobs: can this node reach the store's endpoint? A refused
// connection means the host answers but nothing listens yet (fine before node
// rank 0 starts); no answer or no such host is a failure.
std::optional<LimitCheck> EndpointCheck(const LaunchConfig& c) {
  // A single node on the default address hosts its store on loopback: the
  // port checks say all there is.
  if (c.nnodes_max <= 1 && c.rdzv_endpoint.empty() && c.master_addr == LaunchConfig{}.master_addr) {
    return std::nullopt;
  }
  std::string host = c.master_addr;
  int port = c.master_port.value_or(29500);
  if (c.rdzv_backend == "static") {
    // As the launch reads it: an endpoint without a port takes --master_port's, or is refused.
    if (Status s = StaticStoreAddress(c, &host, &port); !s.ok()) {
      return LimitCheck{"rendezvous " + c.rdzv_endpoint, CheckStatus::kFail, s.message(),
                        "give --rdzv_endpoint=HOST:PORT"};
    }
  } else if (!c.rdzv_endpoint.empty() &&
             !rendezvous::SplitHostPort(c.rdzv_endpoint, 29400, &host, &port).ok()) {
    return std::nullopt;  // the parser already refused it
  }
  if (port == 0) return std::nullopt;  // a single-node store on a free port (--standalone)
  const std::string name = "rendezvous " + rendezvous::HostPort(host, port);
  // Static node rank 0, and a single c10d node, host the store at that
  // address: it must resolve to one of this host's (attack 80: doctor said ok
  // to an address the launch could not bind).
  const bool hosts = c.rdzv_backend == "static" ? c.node_rank == 0 : c.nnodes_max <= 1;
  if (hosts) {
    auto bound = rendezvous::BindListener(host, port);
    if (bound.ok()) {
      return LimitCheck{name, CheckStatus::kOk,
                        "an address of this host, free: this node's ddprun would host the "
                        "rendezvous store there",
                        ""};
    }
    if (bound.status().code() != StatusCode::kUnavailable) {  // in use: the port check's
      const std::string option = c.rdzv_endpoint.empty() ? "--master_addr" : "--rdzv_endpoint";
      return LimitCheck{
          name, CheckStatus::kFail,
          "this node would host the rendezvous store there and cannot: " + bound.status().message(),
          "give " + option +
              " a name or address of this host that every node resolves "
              "(hostname -f; ip -brief address shows the addresses)"};
    }
  }
  auto fd =
      rendezvous::ConnectWithRetry(host, port, rendezvous::Clock::now() + std::chrono::seconds(3));
  if (fd.ok()) return LimitCheck{name, CheckStatus::kOk, "connected", ""};
  const std::string why = fd.status().message();
  if (why.find("refused") != std::string::npos) {
    // An address of this host where nothing listens: under c10d, this node's
    // agent (the one that can bind the endpoint) would host the store.
    if (c.rdzv_backend == "c10d" && rendezvous::BindListener(host, port).ok()) {
      return LimitCheck{name, CheckStatus::kOk,
                        "an address of this host, free: this node's ddprun would host the "
                        "rendezvous store there",
                        ""};
    }
    return LimitCheck{name, CheckStatus::kWarn, "host answers, nothing listens on the port yet",
                      "fine before node rank 0's ddprun starts; otherwise check its "
                      "--master_port/--rdzv_endpoint"};
  }
  return LimitCheck{name, CheckStatus::kFail, "cannot reach: " + why,
                    "check the host name (every node must resolve it), routes and firewalls "
                    "between the nodes"};
}

}  // namespace

std::string FormatDoctorTable(const std::string& header, const std::vector<LimitCheck>& checks) {
  size_t width = 5;
  for (const auto& c : checks) width = std::max(width, c.check.size());
  std::ostringstream o;
  o << "# " << header << "\n# " << std::string("mark  ") << "check" << std::string(width - 5, ' ')
    << "  measured\n";
  int counts[3] = {0, 0, 0};
  for (const auto& c : checks) {
    ++counts[static_cast<int>(c.status)];
    std::string mark = env::CheckStatusName(c.status);
    o << "  " << mark << std::string(6 - mark.size(), ' ') << c.check
      << std::string(width - c.check.size(), ' ') << "  " << c.measured << "\n";
    if (!c.fix.empty()) o << "  " << std::string(6 + width + 2, ' ') << "fix: " << c.fix << "\n";
  }
  o << "# " << counts[0] << " ok, " << counts[1] << " warn, " << counts[2]
    << " fail: " << (counts[2] == 0 ? "OK" : "FAILED") << "\n";
  return o.str();
}

StatusOr<DoctorReport> RunDoctor(const std::vector<std::string>& options,
                                 const env::Environ& environ, const HostCounts& host) {
  // The parser wants a program: a stand-in when none is given.
  auto split = SplitCommandLine(options);
  if (!split.ok()) return split.status();
  const bool program_given = split->program.has_value();
  std::vector<std::string> args = options;
  if (!program_given) args.insert(args.end(), {"--", "/bin/true"});
  auto parsed = ParseCommandLine(args, environ, host);
  if (!parsed.ok()) return parsed.status();
  LaunchConfig& c = parsed->config;
  // The store where the launch would look for it (a Slurm node's NodeAddr).
  std::optional<LimitCheck> store_host;
  if (auto said = ResolveSlurmStoreHost(c); !said.ok()) {
    store_host = LimitCheck{"Slurm store host", CheckStatus::kFail, said.status().message(), ""};
  } else if (!said->empty()) {
    store_host = LimitCheck{"Slurm store host", CheckStatus::kOk, *said, ""};
  }
  const int gpus = env::GpusSeen(c.visible_gpus, host.gpus);
  const env::JobShape job{c.nproc_per_node, c.threads_per_worker, gpus};
  const env::LimitFacts facts = env::ReadLimitFacts(environ);
  DoctorReport report;
  // The GPUs' own warnings are the GPU checks' to say.
  report.checks.push_back(OptionsCheck(parsed->warnings, c.visible_gpus.warnings));
  for (auto& check : env::PlanLimits(facts, job).checks) report.checks.push_back(std::move(check));
  for (auto& check : GpuChecks(host.gpus, c.visible_gpus))
    report.checks.push_back(std::move(check));
  report.checks.push_back(NcclCheck());
  report.checks.push_back(OpenBlasCheck());
  for (auto& check : CudaChecks(!host.gpus.devices.empty()))
    report.checks.push_back(std::move(check));
  report.checks.push_back(env::MemoryCheck(env::ReadMemoryFacts()));
  for (auto& check : InterfaceChecks(environ, gpus)) report.checks.push_back(std::move(check));
  const std::string host_name = env::Hostname();
  report.checks.push_back(env::GlooAddressCheck(
      host_name, env::GlooDefaultAddress(host_name), env::ListInterfaces(),
      env::Lookup(environ, env::kGlooSocketIfname).value_or("").size() > 1, NodesMaySpanHosts(c)));
  for (auto& check : PortChecks(c)) report.checks.push_back(std::move(check));
  for (auto& check : SlurmChecks(c, environ)) report.checks.push_back(std::move(check));
  if (program_given) report.checks.push_back(ProgramCheck(c, environ));
  report.checks.push_back(LogDirectoryCheck(c.log_dir));
  if (auto binding = BindingCheck(c)) report.checks.push_back(std::move(*binding));
  const bool store_unknown = store_host && store_host->status == CheckStatus::kFail;
  if (store_host) report.checks.push_back(std::move(*store_host));
  if (auto endpoint = store_unknown ? std::nullopt : EndpointCheck(c)) {
    report.checks.push_back(std::move(*endpoint));
  }
  for (const auto& check : report.checks) {
    if (check.status == CheckStatus::kFail) report.failed = true;
  }
  report.host = env::Hostname();
  report.nproc_per_node = job.nproc_per_node;
  report.threads_per_worker = job.threads_per_worker;
  const std::string header = "ddprun doctor: host " + report.host + ", nproc_per_node " +
                             std::to_string(job.nproc_per_node) + ", threads_per_worker " +
                             std::to_string(job.threads_per_worker);
  report.text = FormatDoctorTable(header, report.checks);
  return report;
}

}  // namespace ddprun::launcher
