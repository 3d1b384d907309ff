#include "env/slurm.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

namespace ddprun::env {
namespace {

// What slurmstepd gives task 1 of `srun -N2 --ntasks-per-node=1` (reference slurm.md 3b).
Environ TwoNodeStep() {
  return {{"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_ID", "57"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_STEP_NODELIST", "n[07-08]"},
          {"SLURM_NODEID", "1"},
          {"SLURMD_NODENAME", "n08"}};
}

TEST_CASE("slurm: a step's variables say job, node, tasks and the first host") {
  auto step = ReadSlurmStep(TwoNodeStep());
  REQUIRE(step.ok());
  REQUIRE(step->has_value());
  const SlurmStep& s = **step;
  CHECK(s.Id() == "57.0");
  CHECK(s.num_nodes == 2);
  CHECK(s.node_id == 1);
  CHECK(s.first_host == "n07");
  CHECK(s.node_name == "n08");
  CHECK(s.TasksOnThisNode() == 1);
  CHECK(s.restart_count == 0);
}

TEST_CASE("slurm: outside a step there is nothing to read") {
  Environ batch = TwoNodeStep();
  batch.erase("SLURM_STEP_ID");  // an sbatch batch script, salloc
  auto step = ReadSlurmStep(batch);
  REQUIRE(step.ok());
  CHECK_FALSE(step->has_value());
}

TEST_CASE("slurm: the job's variables stand in for missing step ones") {
  Environ e = {{"SLURM_STEP_ID", "3"},
               {"SLURM_JOBID", "9"},
               {"SLURM_NNODES", "3"},
               {"SLURM_NTASKS", "3"},
               {"SLURM_TASKS_PER_NODE", "1(x3)"},
               {"SLURM_JOB_NODELIST", "a,b,c"},
               {"SLURM_NODEID", "2"},
               {"SLURM_RESTART_COUNT", "2"}};
  auto step = ReadSlurmStep(e);
  REQUIRE(step.ok());
  REQUIRE(step->has_value());
  CHECK((*step)->Id() == "9.3");
  CHECK((*step)->num_nodes == 3);
  CHECK((*step)->first_host == "a");
  CHECK((*step)->restart_count == 2);
}

TEST_CASE("slurm: several tasks on one node show") {
  Environ e = TwoNodeStep();
  e["SLURM_STEP_NUM_TASKS"] = "5";
  e["SLURM_STEP_TASKS_PER_NODE"] = "1,4";
  auto step = ReadSlurmStep(e);
  REQUIRE(step.ok());
  CHECK((*step)->TasksOnThisNode() == 4);
  e["SLURM_NODEID"] = "0";
  CHECK((**ReadSlurmStep(e)).TasksOnThisNode() == 1);
}

TEST_CASE("slurm: broken variables are named") {
  for (auto [name, value] : {std::pair{"SLURM_STEP_NUM_NODES", "two"},
                             {"SLURM_NODEID", "2"},  // not below the node count
                             {"SLURM_STEP_TASKS_PER_NODE", "1(x"},
                             {"SLURM_STEP_NODELIST", "n[3-1]"},
                             {"SLURM_RESTART_COUNT", "-1"}}) {
    Environ e = TwoNodeStep();
    e[name] = value;
    auto step = ReadSlurmStep(e);
    REQUIRE_FALSE(step.ok());
    CHECK(step.status().message().find(name) != std::string::npos);
  }
  Environ no_job = TwoNodeStep();
  no_job.erase("SLURM_JOB_ID");
  CHECK_FALSE(ReadSlurmStep(no_job).ok());
  // Several nodes but no node list (a half-copied environment): where is the store?
  Environ no_list = TwoNodeStep();
  no_list.erase("SLURM_STEP_NODELIST");
  auto step = ReadSlurmStep(no_list);
  REQUIRE_FALSE(step.ok());
  CHECK(step.status().message().find("a Slurm step of 2 nodes without its node list") !=
        std::string::npos);
}

TEST_CASE("slurm: tasks per node expand as Slurm writes them") {
  CHECK(*ExpandTasksPerNode("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(*ExpandTasksPerNode("4") == std::vector<int>{4});
  for (auto bad : {"", "x", "2(x0)", "2(x3", "(x2)", "2(y3)", "1,,2", "1(x2000000)"}) {
    CHECK_FALSE(ExpandTasksPerNode(bad).ok());
  }
}

TEST_CASE("slurm: the step port is the same on every node, in range, and differs by step") {
  SlurmStep a;
  a.job_id = "57";
  a.step_id = "0";
  SlurmStep b = a;
  b.step_id = "1";
  CHECK(SlurmStepPort(a) == SlurmStepPort(a));
  CHECK(SlurmStepPort(a) != SlurmStepPort(b));
  for (int job = 1; job < 2000; ++job) {
    a.job_id = std::to_string(job);
    const int port = SlurmStepPort(a);
    CHECK(port >= 20000);
    CHECK(port < 30000);
  }
}

TEST_CASE("slurm: KillWait from scontrol show config") {
  CHECK(ParseKillWait("JobCompType = jobcomp/none\nKillWait                = 30 sec\nX = 1\n") ==
        30);
  CHECK(ParseKillWait("KillWait = 5 sec") == 5);
  CHECK_FALSE(ParseKillWait("KillOnBadExit = 0\n").has_value());
  CHECK_FALSE(ParseKillWait("KillWait = unknown\n").has_value());
}

TEST_CASE("slurm: ProctrackType and KillWait from one scontrol show config") {
  const SlurmConfig c = ParseSlurmConfig(
      "PrologFlags             = (null)\nProctrackType           = proctrack/cgroup\n"
      "KillWait                = 30 sec\n");
  CHECK(c.proctrack == "proctrack/cgroup");
  CHECK(c.kill_wait == 30);
  CHECK(ParseSlurmConfig("X = 1\n").proctrack.empty());
  CHECK(SignalsReachDescendants("proctrack/cgroup"));
  CHECK(SignalsReachDescendants("proctrack/linuxproc"));
  CHECK_FALSE(SignalsReachDescendants("proctrack/pgid"));
  CHECK_FALSE(SignalsReachDescendants(""));
}

TEST_CASE("slurm: only a slurmstepd among this process's ancestors is the step's daemon") {
  CHECK_FALSE(IsAncestorSlurmstepd(getppid()));  // the test runner's parent is no slurmstepd
  CHECK_FALSE(IsAncestorSlurmstepd(getpid()));
  CHECK_FALSE(IsAncestorSlurmstepd(1));
  CHECK_FALSE(IsAncestorSlurmstepd(0));
}

TEST_CASE("slurm: NodeAddr from scontrol show node -o") {
  CHECK(ParseNodeAddr("NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.1.0.7 "
                      "NodeHostName=n1 Version=22.05.8") == "10.1.0.7");
  CHECK(ParseNodeAddr("NodeName=n1 NodeAddr=127.0.0.2\n") == "127.0.0.2");
  CHECK_FALSE(ParseNodeAddr("NodeName=n1 State=IDLE").has_value());
  CHECK_FALSE(ParseNodeAddr("XNodeAddr=1.2.3.4").has_value());
}

}  // namespace
}  // namespace ddprun::env
