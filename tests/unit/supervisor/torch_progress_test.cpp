#include "supervisor/torch_progress.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/torch_hook.hpp"

namespace ddprun::supervisor {
namespace {

using std::chrono::milliseconds;

bool Has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("ddprun_torch_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void Progress(const std::string& dir, int rank, const std::string& line) {
  std::ofstream(dir + "/progress_" + std::to_string(rank)) << line << "\n";
}

TorchProgress At(int rank, long seq, bool entered, const std::string& op = "gloo:all_reduce") {
  TorchProgress p;
  p.rank = rank;
  p.seq = seq;
  p.op = op;
  p.entered = entered;
  return p;
}

TEST_CASE("ReadTorchProgress parses the hook's files and marks ranks without one") {
  const std::string dir = TempDir("read");
  Progress(dir, 0, "47 gloo:all_reduce entered");
  Progress(dir, 1, "46 nccl:broadcast retired");
  Progress(dir, 2, "garbage");
  const auto p = ReadTorchProgress(dir, {0, 1, 2, 3});
  REQUIRE(p.size() == 4);
  CHECK((p[0].rank == 0 && p[0].seq == 47 && p[0].op == "gloo:all_reduce" && p[0].entered));
  CHECK((p[1].rank == 1 && p[1].seq == 46 && p[1].op == "nccl:broadcast" && !p[1].entered));
  CHECK(p[2].seq == -1);
  CHECK(p[3].seq == -1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("NameLaggards names the rank that did not enter the newest collective") {
  const TorchSide side = NameLaggards({At(0, 47, true), At(1, 46, false), At(2, 47, true)});
  CHECK(side.laggards == std::vector<int>{1});
  CHECK(side.verdict == "rank 1 did not enter gloo:all_reduce #47 (ranks 0,2 wait in it)");
  CHECK(Has(side.text,
            "rank 1 did not enter gloo:all_reduce #47: its last is gloo:all_reduce #46 "
            "(finished)"));
  CHECK(Has(side.text, "rank 0 waits in gloo:all_reduce #47"));
}

TEST_CASE("NameLaggards: several laggards, one waiting rank") {
  const TorchSide side = NameLaggards({At(0, 12, true), At(1, 10, true), At(3, 11, false)});
  CHECK(side.laggards == std::vector<int>{1, 3});
  CHECK(side.verdict == "ranks 1,3 did not enter gloo:all_reduce #12 (rank 0 waits in it)");
  CHECK(Has(side.text, "its last is gloo:all_reduce #10 (entered)"));
}

TEST_CASE("NameLaggards without a laggard says where the hang is, never guesses a rank") {
  SUBCASE("every rank inside one collective") {
    const TorchSide side = NameLaggards({At(0, 5, true), At(1, 5, true)});
    CHECK(side.laggards.empty());
    CHECK(Has(side.verdict, "every local rank waits in gloo:all_reduce #5"));
    CHECK(Has(side.verdict, "a rank on another node"));
  }
  SUBCASE("every rank finished its last collective") {
    const TorchSide side = NameLaggards({At(0, 5, false), At(1, 5, false)});
    CHECK(side.laggards.empty());
    CHECK(side.verdict ==
          "ranks 0,1 finished gloo:all_reduce #5: the hang is outside PyTorch's collectives");
  }
  SUBCASE("no collective yet") {
    const TorchSide side = NameLaggards({At(0, -1, false), At(1, -1, false)});
    CHECK(side.laggards.empty());
    CHECK(Has(side.verdict, "before the first one"));
    CHECK(Has(side.text, "rank 1: no collective recorded"));
  }
  SUBCASE("ranks that called different collectives as one number: the odd one is named") {
    std::vector<TorchProgress> at = {At(0, 6, true), At(1, 6, true), At(2, 6, true)};
    at[1].op = "gloo:broadcast";
    const TorchSide side = NameLaggards(at);
    CHECK(side.laggards == std::vector<int>{1});
    CHECK(side.verdict ==
          "the ranks called different collectives as #6: ranks 0,2 gloo:all_reduce, rank 1 "
          "gloo:broadcast: a collective mismatch, each waits for the others in its own");
    at.pop_back();  // two ranks, two calls: no odd one out
    CHECK(NameLaggards(at).laggards.empty());
  }
  SUBCASE("a rank without a record, where the others finished theirs, is said, not blamed") {
    // Its hook recorded nothing: the others could not have finished #5 without it.
    const TorchSide side = NameLaggards({At(0, 5, false), At(1, -1, false)});
    CHECK(side.laggards.empty());
    CHECK(Has(side.verdict, "; rank 1 recorded none"));
  }
}

TEST_CASE("A rank without a record, where another waits in a collective, did not enter it") {
  // Rank 1 stopped after init_process_group, before its first collective (found by an
  // attacking helper: rank 0, the one waiting, was the root cause, "every local rank waits").
  const TorchSide side = NameLaggards({At(0, 1, true), At(1, -1, false)});
  CHECK(side.laggards == std::vector<int>{1});
  CHECK(side.verdict == "rank 1 did not enter gloo:all_reduce #1 (rank 0 waits in it)");
  CHECK(Has(side.text, "rank 1: no collective recorded"));
}

TEST_CASE("A group whose members all still beat makes no one behind") {
  // Ranks 1,2 loop in their own group and never enter the default group's #6, where rank 0
  // waits; their files, read a moment apart, show them at different numbers of their group.
  TorchProgress r1 = At(1, 49, true), r2 = At(2, 47, false);
  for (TorchProgress* p : {&r1, &r2}) {
    p->group = "1";
    p->everyone = false;
    p->members = {1, 2};
  }
  const std::vector<TorchProgress> at = {At(0, 6, true), At(1, 5, false), r1, At(2, 5, false), r2};
  const TorchSide side = NameLaggards(at, /*beating=*/{1, 2});
  CHECK(side.laggards == std::vector<int>{1, 2});
  CHECK(side.verdict == "ranks 1,2 did not enter gloo:all_reduce #6 (rank 0 waits in it)");
  CHECK(Has(side.text,
            "rank 2 is at gloo:all_reduce #47 of process group 1 (ranks 1,2): its "
            "group makes progress (every member beats)"));
  // Without knowing who beats, rank 1 seems to wait in #49 for rank 2.
  CHECK(NameLaggards(at).laggards == std::vector<int>{2});
}

// ddprun's hook in a worker: once a request comes, writes the rank's dump.
std::thread AnswerAsTheHook(const std::string& dir, int rank) {
  return std::thread([dir, rank] {
    for (int i = 0; i < 200 && !std::filesystem::exists(dir + "/dump_request"); ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    std::ofstream(dir + "/nccl_trace_rank_" + std::to_string(rank)) << "trace";
  });
}

TEST_CASE("CollectTorchSide asks through PyTorch's pipe where one is read, else the hook") {
  const std::string dir = TempDir("collect");
  Progress(dir, 0, "21 nccl:all_reduce entered");
  Progress(dir, 1, "20 nccl:all_reduce retired");
  // Rank 0 has a reader on its pipe (as NCCL's heartbeat monitor): it dumps
  // when it reads a line. Rank 1 has none: ddprun's request file asks the hook.
  const std::string pipe = dir + "/pipe_0.pipe";
  REQUIRE(mkfifo(pipe.c_str(), 0600) == 0);
  const int reader = open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  std::thread monitor([&] {
    char buf[8] = {};
    for (int i = 0; i < 200 && read(reader, buf, sizeof buf) <= 0; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    std::ofstream(dir + "/nccl_trace_rank_0") << "trace";
  });
  std::thread hook = AnswerAsTheHook(dir, 1);
  // Port 1: nothing listens, as when NCCL is older than 2.24; an NCCL job is told so.
  const TorchSide side = CollectTorchSide(
      {dir, "", {0, 1}, "", "127.0.0.1:1", milliseconds(3000), milliseconds(100), {}});
  monitor.join();
  hook.join();
  close(reader);
  CHECK(side.laggards == std::vector<int>{1});
  CHECK(Has(side.text, "nccl ras (NCCL_RAS_ADDR=127.0.0.1:1):\n  connect 127.0.0.1:1:"));
  CHECK(Has(side.text, "rank 0: dumped through PyTorch's pipe"));
  CHECK(Has(side.text, "rank 1: dumped by ddprun's hook"));
  CHECK(Has(side.text, "no analysis: no rank's Python made a process group that the hook saw"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("CollectTorchSide says which ranks' dumps did not come, and never counts an old one") {
  const std::string dir = TempDir("missing");
  Progress(dir, 0, "5 gloo:all_reduce entered");
  Progress(dir, 1, "5 gloo:all_reduce entered");
  std::ofstream(dir + "/nccl_trace_rank_1") << "an earlier request's";  // not this request's
  // Only rank 0's hook answers; its dump goes to this request's own directory.
  std::thread hook = AnswerAsTheHook(dir, 0);
  const std::string out = dir + "/request_1/torch";
  const TorchSide side = CollectTorchSide(
      {dir, out, {0, 1}, "/bin/true", "127.0.0.1:1", milliseconds(700), milliseconds(100), {}});
  hook.join();
  // No rank used NCCL's pipe and no RAS service listens: a Gloo job, nothing to say of RAS.
  CHECK_FALSE(Has(side.text, "nccl ras"));
  CHECK(Has(side.text, "pytorch flight recorder (" + out + ")"));
  CHECK(Has(side.text, "rank 0: dumped by ddprun's hook"));
  CHECK(Has(side.text, "rank 1: no dump within 0.7 s: ddprun's hook did not answer"));
  CHECK(std::filesystem::exists(out + "/nccl_trace_rank_0"));
  CHECK_FALSE(std::filesystem::exists(out + "/nccl_trace_rank_1"));
  CHECK_FALSE(std::filesystem::exists(dir + "/nccl_trace_rank_1"));  // the old one is gone
  // No dump at all: nothing to analyse, and no analyser runs.
  const TorchSide none = CollectTorchSide(
      {dir, out + "2", {1}, "/bin/true", "", milliseconds(50), milliseconds(50), {}});
  CHECK(Has(none.text, "no analysis: no rank's flight recorder came"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("CollectTorchSide says when the analyser cannot run") {
  const std::string dir = TempDir("tool");
  Progress(dir, 0, "3 gloo:barrier entered");
  std::thread hook = AnswerAsTheHook(dir, 0);
  const TorchSide side = CollectTorchSide(
      {dir, "", {0}, "/nonexistent/python3", "", milliseconds(3000), milliseconds(2000), {}});
  hook.join();
  CHECK(Has(side.text, "fr_trace (/nonexistent/python3 -m"));
  CHECK_FALSE(Has(side.text, "missing ranks"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("CollectTorchSide gives the analyser's own failure in one line, not its traceback") {
  // fr_trace raises when a rank's dump is missing or cannot be matched (a rank
  // whose Pythons made a process group of their own): its last line says it.
  const std::string dir = TempDir("tool_fails");
  const std::string python = dir + "/python3";
  std::ofstream(python) << "#!/bin/sh\necho 'Traceback (most recent call last):'\n"
                           "echo '  File \"fr_trace.py\", line 9, in main'\n"
                           "echo 'AssertionError: Missing dump files from ranks {1}'\nexit 1\n";
  std::filesystem::permissions(python, std::filesystem::perms::owner_all);
  Progress(dir, 0, "3 gloo:barrier entered");
  std::thread hook = AnswerAsTheHook(dir, 0);
  const TorchSide side =
      CollectTorchSide({dir, "", {0}, python, "", milliseconds(3000), milliseconds(2000), {}});
  hook.join();
  CHECK(Has(side.text,
            "  fr_trace could not analyse the dumps (exit 1): AssertionError: Missing "
            "dump files from ranks {1}\n"));
  CHECK_FALSE(Has(side.text, "Traceback"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("WriteTorchHook writes the hook the workers' Python imports") {
  const std::string dir = TempDir("hook") + "/sub";
  auto written = launcher::WriteTorchHook(dir);
  REQUIRE(written.ok());
  CHECK(*written == dir);
  std::ifstream in(dir + "/sitecustomize.py");
  std::stringstream text;
  text << in.rdbuf();
  CHECK(Has(text.str(), "DDPRUN_TORCH_DIR"));
  CHECK(Has(text.str(), "def _chain():"));           // the user's own sitecustomize still runs
  std::ifstream p2p(dir + "/_ddprun_torch_p2p.py");  // the module it imports
  std::stringstream p2p_text;
  p2p_text << p2p.rdbuf();
  CHECK(Has(p2p_text.str(), "def wrap(c10d_py):"));
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
  CHECK_FALSE(launcher::WriteTorchHook("/proc/ddprun_no_such_dir").ok());
}

}  // namespace
}  // namespace ddprun::supervisor
