// One attempt's worker specs: a duplicate filter whose file cannot be opened
// refuses the job instead of dropping the filtered lines.
#include "launcher/worker_specs.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace ddprun::launcher {
namespace {

struct Fixture {
  Fixture() {
    char dir[] = "/tmp/worker_specs_test_XXXXXX";
    REQUIRE(mkdtemp(dir) != nullptr);
    root = dir;
    auto made = env::LogLayout::Create(root, "run");
    REQUIRE(made.ok());
    layout.emplace(std::move(*made));
    REQUIRE(layout->PrepareAttempt(0, 0, 1).ok());
    program.argv = {"/bin/true"};
    group.master_addr = "127.0.0.1";
  }
  ~Fixture() { std::filesystem::remove_all(root); }

  StatusOr<std::vector<supervisor::WorkerSpec>> Build() {
    return BuildWorkerSpecs(config, program, group, *layout, {});
  }

  std::string root;
  std::optional<env::LogLayout> layout;
  LaunchConfig config;
  Program program;
  env::GroupInfo group;
};

TEST_CASE("the filter files are opened before any worker starts") {
  Fixture f;
  f.config.duplicate_stdout_filters = {"ERROR"};
  f.config.duplicate_stderr_filters = {"WARN"};
  auto specs = f.Build();
  REQUIRE(specs.ok());
  CHECK(std::filesystem::exists(f.layout->FilteredPath(0, "stdout")));
  CHECK(std::filesystem::exists(f.layout->FilteredPath(0, "stderr")));
}

TEST_CASE("a filter file that cannot be opened is a usage error naming it and the errno") {
  Fixture f;
  f.config.duplicate_stderr_filters = {"WARN"};
  const std::string path = f.layout->FilteredPath(0, "stderr");
  std::filesystem::create_directories(path);  // open(O_WRONLY) fails with EISDIR
  auto specs = f.Build();
  REQUIRE_FALSE(specs.ok());
  CHECK(specs.status().code() == StatusCode::kInvalidArgument);
  CHECK(specs.status().message() == "--duplicate_stderr_filters: cannot open " + path +
                                        ": Is a directory (errno 21): make the log directory "
                                        "writable or choose another --log_dir");
}

TEST_CASE("without filters no filter file is needed") {
  Fixture f;
  std::filesystem::create_directories(f.layout->FilteredPath(0, "stdout"));
  CHECK(f.Build().ok());
}

TEST_CASE("torchrun's $local_rank macro is substituted in the arguments, as string.Template") {
  CHECK(SubstituteLocalRank("--local-rank=${local_rank}", 3) == "--local-rank=3");
  CHECK(SubstituteLocalRank("$local_rank", 1) == "1");
  CHECK(SubstituteLocalRank("$local_rank.log", 2) == "2.log");
  CHECK(SubstituteLocalRank("$$x", 0) == "$x");
  CHECK(SubstituteLocalRank("$$local_rank", 5) == "$local_rank");
  CHECK(SubstituteLocalRank("$local_ranks", 5) == "$local_ranks");  // another name
  CHECK(SubstituteLocalRank("${local_rank", 5) == "${local_rank");  // not closed
  CHECK(SubstituteLocalRank("$HOME and $1 and $", 5) == "$HOME and $1 and $");
  CHECK(SubstituteLocalRank("no macro", 5) == "no macro");
}

TEST_CASE("the line prefix template is substituted as torchrun's string.Template") {
  CHECK(LinePrefix("[${role_name}${local_rank}]:", "default", 9, 1, "") == "[default1]:");
  CHECK(LinePrefix("$rank:", "default", 9, 1, "") == "9:");          // $name as well as ${name}
  CHECK(LinePrefix("$$x $rank", "default", 9, 1, "") == "$x 9");     // $$ is a $
  CHECK(LinePrefix("[$other]", "default", 9, 1, "") == "[$other]");  // unknown: kept
  CHECK(LinePrefix("${rank}@${host}", "default", 9, 1, "node3") == "9@node3");
  CHECK(LinePrefix("", "trainer", 9, 2, "") == "[trainer2]:");  // empty: torchrun's default
}

}  // namespace
}  // namespace ddprun::launcher
