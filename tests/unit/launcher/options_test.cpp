#include "launcher/options.hpp"

#include <doctest/doctest.h>

#include <csignal>

#include "env/slurm.hpp"
#include "launcher/option_table.hpp"
#include "tests/unit/launcher/options_test_util.hpp"

namespace ddprun::launcher {
namespace {

using test::Contains;
using test::Error;
using test::Host;
using test::Parse;

TEST_CASE("both spellings and unique prefixes reach the same option") {
  for (auto arg : {"--nproc_per_node=3", "--nproc-per-node=3", "--nproc=3"}) {
    auto p = Parse({arg, "./train"});
    REQUIRE(p.ok());
    CHECK(p->config.nproc_per_node == 3);
  }
  auto spaced = Parse({"--nproc-per-node", "5", "./train"});
  CHECK(spaced->config.nproc_per_node == 5);
}

TEST_CASE("a prefix unique among torchrun's options means what it means under torchrun") {
  // Found by an attacking helper: --t (torchrun's --tee) was ambiguous with ddprun's
  // --threads_per_worker, --h (--help) with --hang_timeout and --hang_detect.
  auto tee = Parse({"--t", "3", "./train"});
  REQUIRE(tee.ok());
  CHECK(tee->config.tee.all == 3);
  // Prefixes that torchrun's options share, or only ddprun's, stay ambiguous.
  CHECK(Contains(Error({"--s=1", "t"}), "ambiguous option --s"));
  CHECK(Contains(Error({"--hang=1", "t"}),
                 "ambiguous option --hang: could be --hang_timeout, "
                 "--hang_detect"));
  CHECK(IsTorchrunOption("tee"));
  CHECK_FALSE(IsTorchrunOption("threads_per_worker"));
}

TEST_CASE("everything after the program goes to the program untouched") {
  auto p = Parse({"--max_restarts=1", "train.py", "--nproc_per_node=9", "-m", "--", "x"});
  REQUIRE(p.ok());
  CHECK(p->config.program == "train.py");
  CHECK(p->config.program_args == std::vector<std::string>{"--nproc_per_node=9", "-m", "--", "x"});
  CHECK(p->config.nproc_per_node == 1);
  CHECK(p->config.max_restarts == 1);
}

TEST_CASE("PET_ variables are fallbacks; the command line wins") {
  env::Environ e{{"PET_NPROC_PER_NODE", "4"}, {"PET_MAX_RESTARTS", "2"}, {"PET_STANDALONE", "1"}};
  auto p = Parse({"--max-restarts=5", "t"}, e);
  REQUIRE(p.ok());
  CHECK(p->config.nproc_per_node == 4);
  CHECK(p->config.max_restarts == 5);
  CHECK(p->config.standalone);
  CHECK(p->config.rdzv_backend == "c10d");
  CHECK(p->config.rdzv_id.size() == 36);
}

TEST_CASE("nproc_per_node takes cpu, gpu and auto") {
  CHECK(Parse({"--nproc_per_node=cpu", "t"})->config.nproc_per_node == 16);
  CHECK(Parse({"--nproc_per_node=auto", "t"})->config.nproc_per_node == 16);
  CHECK(Parse({"--nproc_per_node=auto", "t"}, {}, Host(16, 2))->config.nproc_per_node == 2);
  CHECK(Parse({"--nproc_per_node=gpu", "t"}, {}, Host(16, 8))->config.nproc_per_node == 8);
  CHECK(Contains(Error({"--nproc_per_node=gpu", "t"}), "no visible CUDA device"));
}

TEST_CASE("nproc_per_node=gpu counts the GPUs the workers will see") {
  CHECK(
      Parse({"--nproc_per_node=gpu", "--gpus=1,3", "t"}, {}, Host(16, 8))->config.nproc_per_node ==
      2);
  const env::Environ cvd{{"CUDA_VISIBLE_DEVICES", "5,6,7"}};
  CHECK(Parse({"--nproc_per_node=gpu", "t"}, cvd, Host(16, 8))->config.nproc_per_node == 3);
  const env::Environ hidden{{"CUDA_VISIBLE_DEVICES", ""}};
  auto none = Parse({"--nproc_per_node=gpu", "t"}, hidden, Host(16, 8));
  REQUIRE_FALSE(none.ok());
  CHECK(Contains(none.status().message(), "CUDA_VISIBLE_DEVICES= leaves none"));
}

TEST_CASE("--gpus is checked against the host before anything starts") {
  auto p = Parse({"--gpus", "0,6,7", "--nproc_per_node=3", "t"}, {}, Host(16, 1));
  REQUIRE_FALSE(p.ok());
  CHECK(Contains(p.status().message(),
                 "--gpus=0,6,7: 6, 7 name no GPU of this host, which has "
                 "1 GPU: 0 GPU-0 (0000:10:00.0)"));
  auto ok = Parse({"--gpus", "1,0", "--nproc_per_node=2", "t"}, {}, Host(16, 2));
  REQUIRE(ok.ok());
  CHECK(ok->config.gpus == "1,0");
  CHECK(ok->config.gpu_bus_ids ==
        std::vector<std::optional<std::string>>{"0000:11:00.0", "0000:10:00.0"});
}

TEST_CASE("more workers than visible GPUs: an error with --virtual_local_rank, else a warning") {
  auto virt = Parse({"--virtual_local_rank", "--nproc_per_node=3", "t"}, {}, Host(16, 2));
  REQUIRE_FALSE(virt.ok());
  CHECK(Contains(virt.status().message(),
                 "--nproc_per_node=3 with --virtual_local_rank needs one "
                 "GPU per worker, but 2 GPUs are visible (every GPU of "
                 "the host)"));
  auto shared = Parse({"--nproc_per_node=3", "t"}, {}, Host(16, 2));
  REQUIRE(shared.ok());
  REQUIRE(shared->warnings.size() == 1);
  CHECK(Contains(shared->warnings[0], "local rank 2 has no GPU of its own"));
  CHECK(Contains(Parse({"--nproc_per_node=4", "t"}, {}, Host(16, 2))->warnings[0],
                 "local ranks 2 to 3 have no GPU of their own"));
  CHECK(Parse({"--nproc_per_node=cpu", "t"}, {}, Host(16, 2))->warnings.empty());
  CHECK(Parse({"--nproc_per_node=3", "t"}, {}, Host(16, 0))->warnings.empty());
  CHECK(Parse({"--nproc_per_node=3", "t"})->warnings.empty());  // GPUs unknown
}

TEST_CASE("the allowed CPUs reach the launch config for the OMP_NUM_THREADS default") {
  CHECK(Parse({"--nproc_per_node=2", "t"}, {}, Host(4, 0))->config.allowed_cpus == 4);
  CHECK(Parse({"--nproc_per_node=cpu", "t"}, {}, Host(3, 0))->config.nproc_per_node == 3);
}

TEST_CASE("usage errors name the option, the value and what is accepted") {
  CHECK(
      Contains(Error({"--nproc_per_node=0", "t"}), "--nproc_per_node=0: a number from 1 to 65536"));
  CHECK(Contains(Error({"--nproc_per_node=-1", "t"}), "--nproc_per_node=-1"));
  CHECK(Contains(Error({"--nproc_per_node=abc", "t"}), "cpu, gpu or auto"));
  CHECK(Contains(Error({"--nnodes=3:2", "t"}), "--nnodes=3:2: MIN must not exceed MAX"));
  CHECK(Contains(Error({"--nnodes=1:2:3", "t"}), "--nnodes=1:2:3"));
  // A bad part is quoted in the value as given, not alone.
  CHECK(Contains(Error({"--nnodes=1:0", "t"}), "invalid --nnodes=1:0: "));
  CHECK(Contains(Error({"--nnodes=:2", "t"}), "invalid --nnodes=:2: "));
  CHECK(Contains(Error({"--nproc_per_node=1", ""}), "the program is an empty argument"));
  CHECK(Contains(Error({"--master_port=70000", "t"}), "--master_port=70000: a port number"));
  CHECK(Contains(Error({"-m", "--no_python", "t"}), "-m/--module and --no_python"));
  CHECK(
      Contains(Error({"--nproc_per_node=xpu", "t"}), "--nproc_per_node=xpu is not supported yet"));
  CHECK(Contains(Error({"--run_path", "-m", "t"}), "--run_path and -m/--module cannot be used"));
  CHECK(Contains(Error({"--run_path", "--no_python", "t"}), "--run_path and --no_python cannot"));
  CHECK(Contains(Error({"--max_restarts=-1", "t"}),
                 "--max_restarts=-1: a number from 0 to 1073741824"));
  CHECK(Contains(Error({"--rdzv_conf=join_timeout", "t"}), "KEY=VALUE"));
  CHECK(Contains(Error({"--rdzv_conf=a=", "t"}), "KEY=VALUE"));
  CHECK(Contains(Error({"--shutdown_timeout=-3", "t"}), "seconds >= 0"));
  CHECK(Contains(Error({"--signals_to_handle=SIGFOO", "t"}), "SIGFOO"));
  CHECK(Contains(Error({"--tee=4", "t"}), "--tee=4"));
  CHECK(Contains(Error({"--start_method=thread", "t"}), "spawn, fork or forkserver"));
  CHECK(Contains(Error({"--local_ranks_filter=3", "t"}), "from 0 to 0"));
  CHECK(Contains(Error({"--gpus=a,b", "t"}), "\"a\" is neither"));
  CHECK(Contains(Error({"--nproc_per_node=2"}), "no program to run"));
  CHECK(Contains(Error({"--nproc_per_node"}), "needs a value"));
  CHECK(Contains(Error({"--standalone=1", "t"}), "takes no value"));
}

TEST_CASE("an unknown option gets the closest valid spelling") {
  CHECK(Contains(Error({"--nproc_per_nodes=2", "t"}), "did you mean --nproc-per-node"));
  CHECK(Contains(Error({"--rdvz_backend=c10d", "t"}), "did you mean --rdzv-backend"));
  // Nothing near: no guess ("--bogus" was "did you mean --gpus?").
  CHECK(Contains(Error({"--bogus", "t"}), "unknown option --bogus (ddprun --help lists"));
  CHECK(Contains(Error({"--max_restrats=2", "t"}), "--max-restarts"));
  CHECK(Contains(Error({"--master=x", "t"}), "ambiguous option --master"));
  CHECK(Contains(Error({"-x", "t"}), "unknown option -x"));
}

TEST_CASE("cpu binding options: torchrun's --numa_binding modes and ddprun's --cpu_binding") {
  const std::pair<const char*, env::BindMode> cases[] = {
      {"--numa_binding=node", env::BindMode::kNumaNode},
      {"--numa-binding=socket", env::BindMode::kNumaSocket},
      {"--numa_binding=exclusive", env::BindMode::kNumaExclusive},
      {"--numa_binding=core-complex", env::BindMode::kNumaCoreComplex},
      {"--cpu_binding=spread", env::BindMode::kSpread},
      {"--cpu-binding=compact", env::BindMode::kCompact},
      {"--cpu_binding=none", env::BindMode::kNone},
  };
  for (const auto& [arg, mode] : cases) {
    auto p = Parse({arg, "t"});
    REQUIRE(p.ok());
    CHECK(p->config.binding == mode);
  }
  CHECK(Parse({"t"})->config.binding == env::BindMode::kNone);
  CHECK(Parse({"t"}, {{"PET_CPU_BINDING", "spread"}})->config.binding == env::BindMode::kSpread);
  CHECK(Parse({"t"}, {{"PET_NUMA_BINDING", "socket"}})->config.binding ==
        env::BindMode::kNumaSocket);
  CHECK(Parse({"--numa_binding=node", "--cpu_binding=none", "t"})->config.binding ==
        env::BindMode::kNumaNode);
}

TEST_CASE("cpu binding options: bad modes and both options together are usage errors") {
  CHECK(Error({"--numa_binding=core_complex", "t"}) ==
        "invalid --numa_binding=core_complex: node, socket, exclusive or core-complex");
  CHECK(Contains(Error({"--cpu_binding=scatter", "t"}), "none, spread or compact"));
  CHECK(Error({"--numa_binding=node", "--cpu_binding=spread", "t"}) ==
        "--numa_binding=node and --cpu_binding=spread both bind workers to CPUs: give one of "
        "them");
  CHECK(Contains(Error({"t"}, {{"PET_CPU_BINDING", "x"}}), "PET_CPU_BINDING=x"));
}

TEST_CASE("later work is refused with not supported yet") {
  for (auto arg : {"--rdzv_backend=etcd", "--logs_specs=x"}) {
    auto p = Parse({arg, "t"});
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == StatusCode::kUnimplemented);
    CHECK(Contains(p.status().message(), "not supported yet"));
  }
  CHECK(Contains(Error({"--rdzv_backend=zookeeper", "t"}), "static or c10d"));
  CHECK(Contains(Error({"--event_log_handler=syslog", "t"}),
                 "invalid --event_log_handler=syslog: null, json, console or dynamic_rendezvous"));
  // torchrun's third handler, a null one there.
  CHECK(Parse({"--event_log_handler=dynamic_rendezvous", "t"})->config.event_log_handler ==
        "dynamic_rendezvous");
  CHECK(Parse({"--event_log_handler=json", "t"})->config.event_log_handler == "json");
  CHECK(Parse({"t"}, {{"PET_EVENT_LOG_HANDLER", "console"}})->config.event_log_handler ==
        "console");
  CHECK(Contains(Error({"--nnodes=1:4", "t"}), "needs --rdzv_backend=c10d"));
  // c10d without an endpoint (or an empty one): localhost, as torchrun; a warning on several nodes.
  for (const char* endpoint : {"", "--rdzv_endpoint="}) {
    CAPTURE(endpoint);
    std::vector<std::string> args = {"--rdzv_backend=c10d", "t"};
    if (*endpoint != '\0') args.insert(args.begin(), endpoint);
    auto single = Parse(args);
    REQUIRE(single.ok());
    CHECK(single->config.rdzv_endpoint == "localhost");
    CHECK(single->warnings.empty());
    args.insert(args.begin(), "--nnodes=2");
    auto several = Parse(args);
    REQUIRE(several.ok());
    CHECK(several->config.rdzv_endpoint == "localhost");
    REQUIRE(several->warnings.size() == 1);
    CHECK(
        Contains(several->warnings[0], "no --rdzv_endpoint: the rendezvous store is on localhost"));
  }
  CHECK(Contains(Error({"--standalone", "--nnodes=2", "t"}), "single-node job"));
}

TEST_CASE("stream selections per rank, signals and timeouts") {
  auto p = Parse({"--nproc_per_node=2", "-r", "0:1,1:2", "-t3", "--signals_to_handle=SIGTERM,USR1",
                  "--shutdown-timeout=2.5", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.redirects.For(0) == 1);
  CHECK(p->config.redirects.For(1) == 2);
  CHECK(p->config.redirects.For(7) == 0);
  CHECK(p->config.tee.For(5) == 3);
  CHECK(p->config.handled_signals == std::set<int>{SIGTERM, SIGUSR1});
  CHECK(p->config.shutdown_timeout == doctest::Approx(2.5));
  auto env_timeout = Parse({"t"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}});
  CHECK(env_timeout->config.shutdown_timeout == doctest::Approx(7));
  CHECK(Parse({"t"})->config.shutdown_timeout == doctest::Approx(30));
}

TEST_CASE("options with no effect in ddprun are said, not silently dropped") {
  auto p = Parse({"--monitor_interval=5", "t"});
  REQUIRE(p.ok());
  REQUIRE(p->notices.size() == 1);
  CHECK(Contains(p->notices[0], "--monitor_interval=5 has no effect"));
}

TEST_CASE("--hang_detect=torch without --startup_timeout says what goes unwatched") {
  auto p = Parse({"--hang_detect=torch", "--hang_timeout=30", "t.py"});
  REQUIRE(p.ok());
  REQUIRE(p->notices.size() == 1);
  CHECK(Contains(p->notices[0],
                 "a hang before every rank's first (in init_process_group, say) "
                 "is found only with --startup_timeout"));
  CHECK(Parse({"--hang_detect=torch", "--hang_timeout=30", "--startup_timeout=600", "t.py"})
            ->notices.empty());
}

TEST_CASE("help and version") {
  CHECK(Parse({"--help"})->action == Action::kHelp);
  CHECK(Parse({"-h"})->action == Action::kHelp);
  CHECK(Parse({"--version"})->action == Action::kVersion);
  for (const auto& def : OptionTable()) CHECK(Contains(HelpText(), std::string("--") + def.name));
}

TEST_CASE("duplicate filters treat ,, as a literal comma") {
  auto p = Parse({"--duplicate_stdout_filters=ERROR,a,,b", "t"});
  CHECK(p->config.duplicate_stdout_filters == std::vector<std::string>{"ERROR", "a,b"});
  // Attack 78: an empty item was dropped; torchrun keeps it (it matches every line).
  CHECK(Parse({"--duplicate_stdout_filters=ERROR,", "t"})->config.duplicate_stdout_filters ==
        std::vector<std::string>{"ERROR", ""});
  CHECK(Parse({"--duplicate_stderr_filters=", "t"})->config.duplicate_stderr_filters ==
        std::vector<std::string>{""});
}

TEST_CASE("every duration option refuses nan, infinity and anything but a decimal number") {
  for (const char* option : {"monitor_interval", "shutdown_timeout", "hang_timeout",
                             "startup_timeout", "exit_timeout"}) {
    for (const char* v : {"nan", "NaN", "inf", "-inf", "1e400", "0x10", "3s", "-1", "+-3", "3_",
                          "_3", "3__0", "+ 3", ""}) {
      const std::string arg = std::string("--") + option + "=" + v;
      CAPTURE(arg);
      const std::string e = Error({arg, "t"});
      CHECK(Contains(e, "invalid " + arg + ": a number of seconds"));
    }
  }
  CHECK(Parse({"--shutdown_timeout=0.5", "t"})->config.shutdown_timeout == doctest::Approx(0.5));
  CHECK(Parse({"--hang_timeout=1e3", "t"})->config.hang_timeout == doctest::Approx(1000));
  // As Python's float(), through which torchrun reads them.
  CHECK(Parse({"--monitor_interval= +0.5\n", "t"})->config.monitor_interval ==
        doctest::Approx(0.5));
  CHECK(Parse({"--hang_timeout=1_000.5", "t"})->config.hang_timeout == doctest::Approx(1000.5));
  CHECK(Parse({"--exit_timeout=+.5", "t"})->config.exit_timeout == doctest::Approx(0.5));
}

TEST_CASE("--exit_timeout is the --hang_timeout unless given; 0 waits for an exit unbounded") {
  CHECK(Parse({"t"})->config.exit_timeout == 0);
  CHECK(Parse({"--hang_timeout=300", "t"})->config.exit_timeout == doctest::Approx(300));
  CHECK(Parse({"--hang_timeout=300", "--exit_timeout=60", "t"})->config.exit_timeout ==
        doctest::Approx(60));
  CHECK(Parse({"--hang_timeout=300", "--exit_timeout=0", "t"})->config.exit_timeout == 0);
  CHECK(Parse({"--exit-timeout=7", "t"})->config.exit_timeout == doctest::Approx(7));
}

TEST_CASE("--signals_to_handle needs at least one signal") {
  CHECK(
      Contains(Error({"--signals_to_handle=", "t"}), "invalid --signals_to_handle=: at least one"));
  CHECK(Contains(Error({"--signals_to_handle= , ", "t"}), "invalid --signals_to_handle"));
}

TEST_CASE("numeric environment variables are checked like options") {
  CHECK(Contains(Error({"t"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "nan"}}),
                 "invalid TORCH_ELASTIC_SHUTDOWN_TIMEOUT=nan: a number of seconds >= 0"));
  const std::string pet = Error({"t"}, {{"PET_SHUTDOWN_TIMEOUT", "nan"}});
  CHECK(Contains(pet, "PET_SHUTDOWN_TIMEOUT=nan: invalid --shutdown_timeout=nan"));
  CHECK(Contains(Error({"t"}, {{"PET_NPROC_PER_NODE", "2.5"}}), "--nproc_per_node=2.5"));
}

TEST_CASE("an error about a flag set by PET_<NAME> names the variable") {
  // Found by an attacking helper (attack 99): valued options' errors named their PET_ variable,
  // flags' did not ("-m/--module and --no_python cannot be used together" with only -m given).
  CHECK(Contains(Error({"-m", "json.tool"}, {{"PET_NO_PYTHON", "1"}}),
                 "PET_NO_PYTHON=1: -m/--module and --no_python cannot be used together"));
  CHECK(Contains(Error({"--nnodes=2", "t"}, {{"PET_STANDALONE", "1"}}),
                 "PET_STANDALONE=1: invalid --nnodes=2"));
  // Both from the environment: both named. A flag named only as part of a longer name is not.
  CHECK(Contains(Error({"t"}, {{"PET_NO_PYTHON", "1"}, {"PET_MODULE", "1"}}),
                 "PET_MODULE=1, PET_NO_PYTHON=1: -m/--module and --no_python"));
  CHECK_FALSE(
      Contains(Error({"--nnodes=2", "t"}, {{"PET_STANDALONE", "1"}, {"PET_NO_PYTHON", "1"}}),
               "PET_NO_PYTHON"));
}

TEST_CASE("integers are read as Python's int() reads them, as torchrun does, and nothing more") {
  for (const char* arg :
       {"--nproc_per_node=2.0", "--max_restarts=1e3", "--master_port=0x50", "--node_rank=0 x",
        "--threads_per_worker=99999999999999999999", "--max_restarts=+-1", "--max_restarts=1__0",
        "--max_restarts=_1", "--max_restarts=1_", "--max_restarts= ", "--max_restarts=++1"}) {
    CAPTURE(arg);
    CHECK(Contains(Error({arg, "t"}), std::string("invalid ") + arg + ":"));
  }
  // Blanks around it (`wc -l` pads its count on some systems), a '+' and '_' between digits.
  auto p = Parse({"--nproc_per_node= 2\t", "--max_restarts=+1_0", "--master_port=\n29500 ",
                  "--local_ranks_filter=0, 1", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.nproc_per_node == 2);
  CHECK(p->config.max_restarts == 10);
  CHECK(p->config.master_port == 29500);
  CHECK(Contains(Error({"--rdzv_conf=keep_alive_max_attempt=0_", "t"}), "a whole number >= 1"));
  CHECK(Parse({"--rdzv_conf=keep_alive_max_attempt= 3,join_timeout=+1_0", "t"}).ok());
}

TEST_CASE("stream selections name only local ranks that exist") {
  CHECK(Contains(Error({"-t", "9:1", "t"}), "invalid --tee=9:1"));
  CHECK(Contains(Error({"-t", "9:1", "t"}), "local ranks from 0 to 0"));
  CHECK(Contains(Error({"--nproc_per_node=2", "-r", "0:1,2:3", "t"}), "from 0 to 1"));
  auto p = Parse({"--nproc_per_node=2", "-r", "0:1,1:3", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.redirects.For(1) == 3);
}

TEST_CASE("run ids and roles are restricted to characters safe in paths and prefixes") {
  const std::string allowed = "characters from A-Z, a-z, 0-9, '.', '_' and '-'";
  CHECK(Contains(Error({"--role=a\nb", "t"}), "invalid --role=a\\nb: 1 to 128 " + allowed));
  CHECK(Contains(Error({"--role=.hidden", "t"}), "not starting with '.'"));
  CHECK(Contains(Error({"--role=" + std::string(129, 'r'), "t"}), "1 to 128"));
  CHECK(Contains(Error({"--rdzv_id=../../x", "t"}), "invalid --rdzv_id=../../x: 1 to 128"));
  CHECK(Contains(Error({"--rdzv_id=a/b", "t"}), "invalid --rdzv_id=a/b"));
  CHECK(Contains(Error({"t"}, {{"PET_RDZV_ID", ".."}}), "PET_RDZV_ID=..: invalid --rdzv_id=.."));
  auto p = Parse({"--role=trainer-1.a_B", "--rdzv_id=job_42.x-Y", "--master_port=29500", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.role == "trainer-1.a_B");
  CHECK(p->config.rdzv_id == "job_42.x-Y");
}

TEST_CASE("LOGLEVEL is one of the logging levels, in any case") {
  CHECK(*LogLevelName({}) == "info");
  CHECK(*LogLevelName({{"LOGLEVEL", ""}}) == "info");
  CHECK(*LogLevelName({{"LOGLEVEL", "DEBUG"}}) == "debug");
  CHECK(*LogLevelName({{"LOGLEVEL", "warning"}}) == "warning");
  CHECK(*LogLevelName({{"LOGLEVEL", "Warn"}}) == "warning");
  CHECK(*LogLevelName({{"LOGLEVEL", "ERROR"}}) == "error");
  auto bad = LogLevelName({{"LOGLEVEL", "garbage"}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message() ==
        "invalid LOGLEVEL=garbage: TRACE, DEBUG, INFO, WARNING, WARN, ERROR, CRITICAL or OFF");
}

TEST_CASE("enumerated options list what they accept") {
  CHECK(Contains(Error({"--hang_detect=both", "t"}),
                 "invalid --hang_detect=both: heartbeat, output or torch"));
  CHECK(Contains(Error({"--start_method=Spawn", "t"}),
                 "invalid --start_method=Spawn: spawn, fork or forkserver"));
}

TEST_CASE("an option's value words are the lower-case alternatives of its value name") {
  auto words = [](const char* name) {
    auto view = ValueWords(**FindLongOption(name));
    return std::vector<std::string>(view.begin(), view.end());
  };
  CHECK(words("hang_detect") == std::vector<std::string>{"heartbeat", "output", "torch"});
  CHECK(words("nproc_per_node") == std::vector<std::string>{"cpu", "gpu", "auto"});
  CHECK(words("redirects") == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(words("stdin") == std::vector<std::string>{"auto", "all", "none"});
  CHECK(words("rdzv_backend") == std::vector<std::string>{"static", "c10d"});
  CHECK(words("print_completion") == std::vector<std::string>{"bash", "zsh"});
  CHECK(words("nnodes").empty());
  CHECK(words("rdzv_endpoint").empty());
  CHECK(words("standalone").empty());
}

TEST_CASE("one parser reads every spelling; an option given twice keeps the last value") {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-t3", "t"},
                                               {"-t", "3", "t"},
                                               {"-t=3", "t"},
                                               {"--tee=3", "t"},
                                               {"--tee", "3", "t"},
                                               {"--te=3", "t"}}) {
    auto p = Parse(args);
    REQUIRE(p.ok());
    CHECK(p->config.tee.all == 3);
  }
  CHECK(Parse({"--max_restarts=1", "--max-restarts", "2", "t"})->config.max_restarts == 2);
  CHECK(Parse({"--standalone", "t"})->config.standalone);
  auto split = SplitCommandLine({"-m", "--nproc-per-node", "2", "--rdzv-conf=a=b", "x", "-t", "1"});
  REQUIRE(split.ok());
  CHECK(split->values == std::map<std::string, std::string>{
                             {"module", "1"}, {"nproc_per_node", "2"}, {"rdzv_conf", "a=b"}});
  CHECK(split->launcher ==
        std::vector<std::string>{"--module", "--nproc_per_node=2", "--rdzv_conf=a=b"});
  CHECK(*split->program == "x");
  CHECK(split->program_args == std::vector<std::string>{"-t", "1"});
  // Short flags bundle as in argparse: the last one may take the rest as its value.
  auto bundled = SplitCommandLine({"-mt3", "x"});
  REQUIRE(bundled.ok());
  CHECK(bundled->launcher == std::vector<std::string>{"--module", "--tee=3"});
  CHECK(SplitCommandLine({"-mm", "x"})->launcher ==
        std::vector<std::string>{"--module", "--module"});
  CHECK(SplitCommandLine({"-mr=0:1", "x"})->launcher ==
        std::vector<std::string>{"--module", "--redirects=0:1"});
  CHECK(SplitCommandLine({"-mx", "x"}).status().message() ==
        "unknown option -x in -mx: the short options are -m, -r, -t and -h");
  CHECK(SplitCommandLine({"-m=1", "x"}).status().message() ==
        "option -m takes no value (got -m=1)");
}

TEST_CASE("the first \"--\" ends the options, before the program or right after it, as torchrun") {
  using Args = std::vector<std::string>;
  auto args = [](const Args& line) { return SplitCommandLine(line)->program_args; };
  CHECK(args({"a.py", "--", "x", "--y"}) == Args{"x", "--y"});
  CHECK(args({"--", "a.py", "x"}) == Args{"x"});
  CHECK(args({"a.py", "x", "--", "y"}) == Args{"x", "--", "y"});
  CHECK(args({"a.py", "--", "--", "x"}) == Args{"--", "x"});
  CHECK(args({"--", "a.py", "--", "x"}) == Args{"--", "x"});
  CHECK(args({"--nproc_per_node=2", "a.py", "--"}) == Args{});
}

TEST_CASE("a value that looks like an option is refused, as torchrun's argparse does") {
  CHECK(Contains(Error({"--role", "--", "a.py"}),
                 "option --role needs a value: NAME (got the option-like '--'; write --role=-- "));
  CHECK(
      Contains(Error({"--rdzv_id", "--standalone", "a.py"}), "got the option-like '--standalone'"));
  CHECK(Parse({"--role=--x", "a.py"})->config.role == "--x");  // with '=' it is a value
}

TEST_CASE("an empty value reaches the option's own check") {
  CHECK(Contains(Error({"--role=", "t"}), "invalid --role=: 1 to 128 characters"));
  CHECK(Contains(Error({"--nproc_per_node=", "t"}),
                 "invalid --nproc_per_node=: a number from 1 to 65536"));
  CHECK(Contains(Error({"--shutdown_timeout", "", "t"}), "invalid --shutdown_timeout=: a number"));
}

TEST_CASE("--run_path takes a relative script, as torchrun") {
  auto p = Parse({"--run_path", "sub/rp.py"});
  REQUIRE(p.ok());
  CHECK(p->config.run_path);
  CHECK(p->config.program == "sub/rp.py");
}

TEST_CASE("--logs_specs=default is the layout ddprun writes; others are not supported yet") {
  CHECK(Parse({"--logs_specs=default", "t"}).ok());
  auto other = Parse({"--logs-specs=my_pkg.specs", "t"});
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().code() == StatusCode::kUnimplemented);
  CHECK(Contains(other.status().message(), "not supported yet"));
}

}  // namespace
}  // namespace ddprun::launcher
