// Options inside and around Slurm: the rendezvous from the step, what wins over it, and the
// signals forwarded there.
#include <doctest/doctest.h>

#include <csignal>
#include <set>
#include <string>

#include "env/slurm.hpp"
#include "launcher/options.hpp"
#include "tests/unit/launcher/options_test_util.hpp"

namespace ddprun::launcher {
namespace {

using test::Contains;
using test::Error;
using test::Parse;

// Task `node` of `srun -N<nodes> --ntasks-per-node=<per_node> ddprun ...`.
env::Environ SlurmStep(int nodes, int node, int per_node = 1) {
  return {{"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_ID", "57"},
          {"SLURM_STEP_NUM_NODES", std::to_string(nodes)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(nodes * per_node)},
          {"SLURM_STEP_TASKS_PER_NODE",
           std::to_string(per_node) + (nodes > 1 ? "(x" + std::to_string(nodes) + ")" : "")},
          {"SLURM_STEP_NODELIST", "n[07-" + std::to_string(6 + nodes) + "]"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURMD_NODENAME", "n0" + std::to_string(7 + node)}};
}

TEST_CASE("slurm: inside a step the rendezvous comes from the step") {
  auto p = Parse({"--nproc_per_node=2", "./train"}, SlurmStep(2, 1));
  REQUIRE(p.ok());
  const LaunchConfig& c = p->config;
  CHECK(c.nnodes_min == 2);
  CHECK(c.nnodes_max == 2);
  CHECK(c.node_rank == 1);
  CHECK(c.rdzv_backend == "static");
  CHECK(c.master_addr == "n07");
  REQUIRE(c.master_port.has_value());
  CHECK(*c.master_port == env::SlurmStepPort(*c.slurm));
  CHECK(c.rdzv_id == "57.0");
  REQUIRE(c.slurm.has_value());
  bool said = false;
  for (const auto& n : p->notices) said |= Contains(n, "Slurm step 57.0, node 1 of 2");
  CHECK(said);
}

TEST_CASE("slurm: explicit options and PET_* win over the step") {
  auto p = Parse({"--master_port=29999", "--rdzv_id=mine", "./train"}, SlurmStep(2, 1));
  REQUIRE(p.ok());
  CHECK(*p->config.master_port == 29999);
  CHECK(p->config.rdzv_id == "mine");
  CHECK(p->config.master_addr == "n07");
  auto env = SlurmStep(2, 1);
  env["PET_NODE_RANK"] = "0";
  auto pet = Parse({"./train"}, env);
  REQUIRE(pet.ok());
  CHECK(pet->config.node_rank == 0);
}

TEST_CASE("slurm: c10d gets the endpoint and honours the node id") {
  auto p = Parse({"--rdzv_backend=c10d", "--nnodes=1:4", "./train"}, SlurmStep(2, 1));
  REQUIRE(p.ok());
  CHECK(p->config.rdzv_endpoint == "n07:" + std::to_string(env::SlurmStepPort(*p->config.slurm)));
  CHECK(p->config.node_rank == 1);
  CHECK(p->config.node_rank_set);
  CHECK(p->config.nnodes_max == 4);
}

TEST_CASE("slurm: a one-node step stays a standalone job named by the step") {
  auto p = Parse({"./train"}, SlurmStep(1, 0));
  REQUIRE(p.ok());
  CHECK(p->config.rdzv_backend == "c10d");
  CHECK(p->config.rdzv_endpoint == "localhost:0");
  CHECK(p->config.rdzv_id == "57.0");
}

TEST_CASE("slurm: the classic mistakes are refused at start") {
  auto env4 = SlurmStep(2, 0, 4);
  auto per_node = Error({"--nproc_per_node=2", "./train"}, env4);
  CHECK(Contains(per_node, "--ntasks-per-node=1"));
  CHECK(Contains(per_node, "8 ddprun agents on 2 node(s)"));
  auto one = Error({"--nnodes=1", "./train"}, SlurmStep(2, 0));
  CHECK(Contains(one, "every node would run a 1-node job of its own"));
  auto fewer = Error({"--nnodes=2", "./train"}, SlurmStep(3, 0));
  CHECK(Contains(fewer, "its nodes past 2 would have no node rank in the job"));
  CHECK(Contains(Error({"--slurm=node", "./train"}), "not a Slurm job step"));
  CHECK(Contains(Error({"--slurm=maybe", "./train"}, SlurmStep(2, 0)), "--slurm"));
}

TEST_CASE("slurm: a step of fewer nodes than --nnodes is one of several steps making the job") {
  // One srun per node, as torchrun runs it (found by an attacking helper: it was refused).
  auto p = Parse(
      {"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.2", "--master_port=41031", "./train"},
      SlurmStep(1, 0));
  REQUIRE(p.ok());
  CHECK(p->config.nnodes_max == 2);
  CHECK(p->config.node_rank == 1);
  CHECK(p->config.master_addr == "10.0.0.2");
  CHECK(p->config.rdzv_id != "57.0");  // each step's id differs: none of them names the job
  CHECK(p->config.from_slurm.empty());
  REQUIRE(p->config.slurm.has_value());  // the step still counts for signals and the report
  bool said = false;
  for (const auto& n : p->notices)
    said |= Contains(n, "the job's other nodes come from other steps");
  CHECK(said);
  // What the step cannot tell must be given.
  auto static_missing = Error({"--nnodes=2", "./train"}, SlurmStep(1, 0));
  CHECK(Contains(static_missing,
                 "give --node_rank and --master_addr, or drop --nnodes and run "
                 "srun -N2 --ntasks-per-node=1 ddprun ..."));
  auto c10d = Error({"--nnodes=2:4", "--rdzv_backend=c10d", "./train"}, SlurmStep(1, 0));
  CHECK(Contains(c10d, "give --rdzv_endpoint"));
  auto elastic =
      Parse({"--nnodes=2:4", "--rdzv_backend=c10d", "--rdzv_endpoint=h:29400", "./train"},
            SlurmStep(1, 0));
  REQUIRE(elastic.ok());
  CHECK(elastic->config.rdzv_endpoint == "h:29400");
}

TEST_CASE("slurm: --standalone in a step of several nodes says so, without a fix that fails") {
  auto e = Error({"--standalone", "./train"}, SlurmStep(2, 1));
  CHECK(Contains(e, "--standalone is a single-node job, but this Slurm step has 2 nodes"));
  CHECK_FALSE(Contains(e, "--nnodes=1"));
  CHECK(Parse({"--standalone", "./train"}, SlurmStep(1, 0)).ok());
}

TEST_CASE("slurm: off ignores the step entirely") {
  auto p = Parse({"--slurm=off", "--nproc_per_node=2", "./train"}, SlurmStep(2, 0, 4));
  REQUIRE(p.ok());
  CHECK_FALSE(p->config.slurm.has_value());
  CHECK(p->config.nnodes_max == 1);
  auto env = SlurmStep(2, 0, 4);
  env["PET_SLURM"] = "off";
  CHECK(Parse({"./train"}, env).ok());
}

TEST_CASE("slurm: a multi-node job outside a step is noted") {
  auto p = Parse({"./train"}, {{"SLURM_JOB_ID", "5"}, {"SLURM_NNODES", "4"}});
  REQUIRE(p.ok());
  bool said = false;
  for (const auto& n : p->notices) said |= Contains(n, "srun --ntasks-per-node=1 -n 4");
  CHECK(said);
}

TEST_CASE("slurm: in a job step or a batch script SIGUSR1/SIGUSR2 are forwarded by default") {
  for (const env::Environ& e : {SlurmStep(2, 0), env::Environ{{"SLURM_JOB_ID", "9"}}}) {
    auto p = Parse({"./train"}, e);
    REQUIRE(p.ok());
    CHECK(p->config.handled_signals.count(SIGUSR1) == 1);
    CHECK(p->config.handled_signals.count(SIGUSR2) == 1);
  }
  auto plain = Parse({"./train"});
  REQUIRE(plain.ok());
  CHECK(plain->config.handled_signals.count(SIGUSR1) == 0);
  // Given explicitly, the list rules.
  auto given = Parse({"--signals_to_handle=SIGTERM", "./train"}, SlurmStep(2, 0));
  REQUIRE(given.ok());
  CHECK(given->config.handled_signals == std::set<int>{SIGTERM});
}

}  // namespace
}  // namespace ddprun::launcher
