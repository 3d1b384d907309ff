#include "launcher/machine_reports.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/run_recorder.hpp"

namespace ddprun::launcher {
namespace {

using json = nlohmann::ordered_json;

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("ddprun_reports_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST_CASE("RunRecorder classifies the end and writes incident.json only when it went wrong") {
  LaunchConfig c;
  c.rdzv_id = "job9";
  const std::string dir = TempDir("incident");
  rendezvous::Action exit;
  exit.kind = rendezvous::ActionKind::kExit;

  SUBCASE("success: no incident") {
    RunRecorder r;
    REQUIRE(r.Start(c, "./train", "host-a", "", false).ok());
    CHECK(r.Finish(exit, 0, 0, dir, {}, "", "").empty());
    CHECK_FALSE(std::filesystem::exists(dir + "/incident.json"));
  }
  SUBCASE("SIGTERM in a Slurm job is preempted, outside one signalled") {
    for (bool slurm : {true, false}) {
      RunRecorder r;
      REQUIRE(r.Start(c, "./train", "host-a", "", slurm).ok());
      r.Signal(SIGTERM);
      const std::string path = r.Finish(exit, 143, 0, dir, {}, "", "");
      REQUIRE(path == dir + "/incident.json");
      std::ifstream in(path);
      const json doc = json::parse(in);
      CHECK(doc["class"] == (slurm ? "preempted" : "signalled"));
      CHECK(doc["signal"] == "SIGTERM");
      CHECK(doc["root_cause"].is_null());
      CHECK(doc["run_id"] == "job9");
    }
  }
  SUBCASE("a failure's class comes from the job record's root cause") {
    RunRecorder r;
    REQUIRE(r.Start(c, "./train", "host-a", "", false).ok());
    exit.failed = true;
    exit.root_cause.cls = rendezvous::FailureClass::kHang;
    exit.root_cause.rank = 3;
    const std::string path = r.Finish(exit, 124, 1, dir, {}, "cause", "fix");
    std::ifstream in(path);
    const json doc = json::parse(in);
    CHECK(doc["class"] == "hang");
    CHECK(doc["root_cause"]["rank"] == 3);
    CHECK(doc["root_cause"]["on_this_node"] == false);
    CHECK(doc["attempt"] == 1);
    CHECK(doc["hints"][0]["cause"] == "cause");
  }
  SUBCASE("a job ended by a signal after a hang was found is signalled, the hang its root cause") {
    RunRecorder r;
    REQUIRE(r.Start(c, "./train", "host-a", "", false).ok());
    exit.failed = true;
    exit.root_cause.cls = rendezvous::FailureClass::kHang;
    exit.root_cause.rank = 1;
    r.Signal(SIGTERM);
    const std::string path = r.Finish(exit, 143, 0, dir, {}, "", "");
    std::ifstream in(path);
    const json doc = json::parse(in);
    CHECK(doc["class"] == "signalled");
    CHECK(doc["exit_code"] == 143);
    CHECK(doc["root_cause"]["class"] == "hang");
    // Exit 124 (the hang's, the signal came after the end was decided): hang.
    RunRecorder later;
    REQUIRE(later.Start(c, "./train", "host-a", "", false).ok());
    later.Signal(SIGTERM);
    std::ifstream in2(later.Finish(exit, 124, 0, dir, {}, "", ""));
    CHECK(json::parse(in2)["class"] == "hang");
  }
  SUBCASE("exit 2 without a failure is a usage error; no log directory, no file") {
    RunRecorder r;
    REQUIRE(r.Start(c, "./train", "host-a", "", false).ok());
    CHECK(r.Finish(exit, 2, 0, "", {}, "", "").empty());
    const std::string path = r.Finish(exit, 2, 0, dir, {}, "", "");
    std::ifstream in(path);
    CHECK(json::parse(in)["class"] == "usage_error");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("DoctorJson lists every check with its status") {
  std::vector<env::LimitCheck> checks(2);
  checks[0].check = "RLIMIT_NPROC (ulimit -u)";
  checks[1].check = "ports";
  checks[1].status = env::CheckStatus::kFail;
  checks[1].fix = "free it";
  const json doc = DoctorJson("node0", 8, 64, checks, true);
  CHECK(doc["schema"] == kDoctorSchema);
  CHECK(doc["checks"][0]["status"] == "ok");
  CHECK(doc["checks"][0]["fix"].is_null());
  CHECK(doc["checks"][1]["status"] == "fail");
  CHECK(doc["checks"][1]["fix"] == "free it");
  CHECK(doc["failed"] == true);
}

TEST_CASE("DoctorUsageErrorJson carries the refusal and no checks") {
  const json doc = DoctorUsageErrorJson("node0", "unknown option --bogus");
  CHECK(doc["schema"] == kDoctorSchema);
  CHECK(doc["usage_error"] == "unknown option --bogus");
  CHECK(doc["failed"] == true);
  CHECK(doc["checks"].empty());
  CHECK_FALSE(doc.contains("nproc_per_node"));
}

}  // namespace
}  // namespace ddprun::launcher
