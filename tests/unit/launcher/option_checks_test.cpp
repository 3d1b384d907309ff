#include "launcher/option_checks.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/unit/launcher/options_test_util.hpp"

namespace ddprun::launcher {
namespace {

using test::Contains;
using test::Error;
using test::Parse;

// The one warning of a command line that parses.
std::string Warning(const std::vector<std::string>& args, const env::Environ& e = {}) {
  auto p = Parse(args, e);
  REQUIRE(p.ok());
  REQUIRE(p->warnings.size() == 1);
  return p->warnings[0];
}

TEST_CASE("hang limits with no log directory for heartbeat files are refused") {
  for (const char* limit : {"--hang_timeout=5", "--startup_timeout=3"}) {
    CHECK(Contains(Error({"--log_dir=/dev/null", limit, "t"}),
                   "need the workers' heartbeat files (--hang_detect=heartbeat), and "
                   "--log_dir=/dev/null leaves nowhere to keep them"));
  }
  CHECK(Contains(Error({"--log_dir=/dev/null", "--hang_detect=torch", "--hang_timeout=5", "t"}),
                 "(--hang_detect=torch)"));
  // Output is watched by ddprun itself: no file needed.
  CHECK(Parse({"--log_dir=/dev/null", "--hang_detect=output", "--hang_timeout=5", "t"}).ok());
}

TEST_CASE("options that do nothing in their company are told") {
  CHECK(Contains(Warning({"--hang_detect=torch", "t.py"}),
                 "--hang_detect=torch finds no hang without --hang_timeout or --startup_timeout "
                 "(its hook still serves `ddprun dump`)"));
  CHECK(Contains(Warning({"--hang_detect=output", "t"}), "--hang_detect=output finds no hang"));
  CHECK(Contains(
      Warning({"--hang_detect=torch", "--hang_timeout=5", "t.py"}, {{"TORCH_FR_BUFFER_SIZE", "0"}}),
      "TORCH_FR_BUFFER_SIZE=0 turns PyTorch's flight recorder off"));
  CHECK(Parse({"--hang_detect=torch", "--hang_timeout=5", "t.py"}, {{"TORCH_FR_BUFFER_SIZE", "9"}})
            ->warnings.empty());
  // Python options that keep the hook (PYTHONPATH's sitecustomize) from loading.
  CHECK(Contains(
      Warning({"--hang_detect=torch", "--hang_timeout=5", "--no_python", "python3", "-E", "t.py"}),
      "python3 -E ignores PYTHONPATH, where ddprun puts the hook of --hang_detect=torch: "
      "it sees no collective, finds no hang and serves no `ddprun dump`; drop -E or use "
      "--hang_detect=heartbeat"));
  CHECK(Contains(Warning({"--hang_detect=torch", "--hang_timeout=5", "--no_python",
                          "/usr/bin/python3.12", "-u", "-Is", "t.py"}),
                 "/usr/bin/python3.12 -I ignores PYTHONPATH"));
  CHECK(Contains(Warning({"--hang_detect=torch", "--hang_timeout=5", "--no_python", "python", "-W",
                          "ignore", "-S", "t.py"}),
                 "python -S imports no site module, which loads the hook"));
  for (auto args : std::vector<std::vector<std::string>>{
           {"--no_python", "python3", "-X", "importtime", "-W", "Ignore", "t.py", "-E"},
           {"--no_python", "python3", "-c", "import os; -E"},
           {"--no_python", "python3", "-Wignore::DeprecationWarning:Emit", "t.py"},
           {"--no_python", "pythonic", "-E", "t.py"},
           {"t.py", "-E"}}) {
    args.insert(args.begin(), {"--hang_detect=torch", "--hang_timeout=5"});
    CAPTURE(args[3]);
    CHECK(Parse(args)->warnings.empty());
  }
  CHECK(Contains(Warning({"--log_dir=/dev/null", "--duplicate_stdout_filters=loss", "t"}),
                 "--duplicate_stdout_filters does nothing with --log_dir=/dev/null"));
  CHECK(Contains(Warning({"--log_dir=/dev/null", "-r", "3", "t"}),
                 "-r/--redirects with --log_dir=/dev/null discards the redirected output"));
  CHECK(Parse({"--log_dir=/dev/null", "t"})->warnings.empty());
}

TEST_CASE("a PET_ variable that no option reads is told, with the closest one") {
  CHECK(Contains(Warning({"t"}, {{"PET_NPROC", "4"}}),
                 "PET_NPROC is set but is no option's variable, so nothing reads it: did you mean "
                 "PET_NPROC_PER_NODE?"));
  CHECK(Contains(Warning({"t"}, {{"PET_MAX_RESTART", "1"}}), "did you mean PET_MAX_RESTARTS?"));
  CHECK(Warning({"t"}, {{"PET_SOMETHING_ELSE_ENTIRELY", "1"}}) ==
        "PET_SOMETHING_ELSE_ENTIRELY is set but is no option's variable, so nothing reads it");
  CHECK(Parse({"t"}, {{"PET_MAX_RESTARTS", "1"}})->warnings.empty());
}

TEST_CASE("what --standalone (or a single-node job) replaces is said, not dropped") {
  auto p =
      Parse({"--standalone", "--rdzv_endpoint=h:1", "--rdzv_id=x", "--master_port=29555", "t"});
  REQUIRE(p.ok());
  std::string all;
  for (const auto& n : p->notices) all += n + "\n";
  CHECK(Contains(all, "--rdzv_endpoint=h:1 has no effect in a --standalone job"));
  CHECK(Contains(all, "--rdzv_id=x has no effect in a --standalone job"));
  CHECK(Contains(all, "--master_port=29555 has no effect in a --standalone job"));
  auto single = Parse({"--rdzv_id=x", "t"});
  REQUIRE(single.ok());
  REQUIRE(single->notices.size() == 1);
  CHECK(Contains(single->notices[0], "--rdzv_id=x has no effect in a single-node job"));
  CHECK(Parse({"t"})->notices.empty());
}

}  // namespace
}  // namespace ddprun::launcher
