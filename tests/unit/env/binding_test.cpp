#include "env/binding.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

namespace ddprun::env {
namespace {

const std::string kData = DDPRUN_TEST_DATA "/topology";

Topology Load(const std::string& name) {
  auto t = ReadTopology(kData + "/" + name + "/sys");
  REQUIRE(t.ok());
  return *t;
}

CpuList AllCpus(const Topology& t) {
  CpuList all;
  for (const auto& p : t.cpus) all.push_back(p.cpu);
  return all;
}

CpuList Cpus(const char* text) { return *ParseCpuList(text); }

// The 2-socket tree's 8 GPUs, in index order: 2 per NUMA node.
std::vector<std::optional<int>> TwoSocketGpuNodes() {
  std::vector<std::optional<int>> nodes;
  for (const char* id : {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                         "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}) {
    nodes.push_back(PciNumaNode(kData + "/two_socket/sys", id));
  }
  return nodes;
}

BindingPlan Plan(const Topology& t, BindMode mode, int nproc, CpuList allowed,
                 std::vector<std::optional<int>> gpu_nodes = {}) {
  auto plan = PlanBinding(t, BindingRequest{mode, nproc, std::move(allowed), std::move(gpu_nodes)});
  REQUIRE_MESSAGE(plan.ok(), plan.status().message());
  REQUIRE(plan->ranks.size() == static_cast<size_t>(nproc));
  return *plan;
}

std::vector<std::string> Texts(const BindingPlan& plan) {
  std::vector<std::string> out;
  for (const auto& r : plan.ranks) out.push_back(FormatCpuList(r));
  return out;
}

bool Disjoint(const BindingPlan& plan) {
  std::set<int> seen;
  for (const auto& r : plan.ranks) {
    for (int c : r) {
      if (!seen.insert(c).second) return false;
    }
  }
  return true;
}

bool Within(const BindingPlan& plan, const CpuList& allowed) {
  for (const auto& r : plan.ranks) {
    if (r.empty() || Intersect(r, allowed) != r) return false;
  }
  return true;
}

int NodeOf(const Topology& t, const CpuList& cpus) {
  int node = t.Find(cpus.front())->node;
  for (int c : cpus) {
    if (t.Find(c)->node != node) return -1;
  }
  return node;
}

TEST_CASE("binding none plans nothing") {
  const Topology t = Load("one_socket");
  CHECK(Plan(t, BindMode::kNone, 0, AllCpus(t)).ranks.empty());
}

TEST_CASE("numa binding node: each rank gets every allowed CPU of its GPU's node") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kNumaNode, 8, AllCpus(t), TwoSocketGpuNodes());
  CHECK(Texts(plan) == std::vector<std::string>{"0-3,16-19", "0-3,16-19", "4-7,20-23", "4-7,20-23",
                                                "8-11,24-27", "8-11,24-27", "12-15,28-31",
                                                "12-15,28-31"});
  CHECK(plan.notes.empty());
  // Only the allowed part of a node.
  plan = Plan(t, BindMode::kNumaNode, 2, Cpus("1-2,4-31"), TwoSocketGpuNodes());
  CHECK(Texts(plan) == std::vector<std::string>{"1-2,16-19", "1-2,16-19"});
}

TEST_CASE("numa binding socket: each rank gets the allowed CPUs of every node of its socket") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kNumaSocket, 8, AllCpus(t), TwoSocketGpuNodes());
  for (int r = 0; r < 4; ++r) CHECK(FormatCpuList(plan.ranks[r]) == "0-7,16-23");
  for (int r = 4; r < 8; ++r) CHECK(FormatCpuList(plan.ranks[r]) == "8-15,24-31");
}

TEST_CASE("numa binding exclusive: a node's whole cores split among its GPUs") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kNumaExclusive, 8, AllCpus(t), TwoSocketGpuNodes());
  CHECK(Texts(plan) == std::vector<std::string>{"0-1,16-17", "2-3,18-19", "4-5,20-21", "6-7,22-23",
                                                "8-9,24-25", "10-11,26-27", "12-13,28-29",
                                                "14-15,30-31"});
  CHECK(Disjoint(plan));
}

TEST_CASE("numa binding exclusive: GPUs no local rank drives still take their share") {
  const Topology t = Load("two_socket");
  // torchrun splits a node among all its GPUs, not only those of local ranks.
  auto plan = Plan(t, BindMode::kNumaExclusive, 1, AllCpus(t), TwoSocketGpuNodes());
  CHECK(FormatCpuList(plan.ranks[0]) == "0-1,16-17");
}

TEST_CASE("numa binding exclusive: odd core counts give the lower GPUs one core more") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kNumaExclusive, 2, Cpus("0-2,16-18"), TwoSocketGpuNodes());
  CHECK(Texts(plan) == std::vector<std::string>{"0-1,16-17", "2,18"});
}

TEST_CASE("numa binding exclusive: fewer allowed cores than GPUs on a node is refused") {
  const Topology t = Load("two_socket");
  auto plan = PlanBinding(t, {BindMode::kNumaExclusive, 2, Cpus("0,16"), TwoSocketGpuNodes()});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == StatusCode::kInvalidArgument);
  CHECK(plan.status().message() ==
        "--numa_binding=exclusive: NUMA node 0 has 1 physical cores among the allowed CPUs for "
        "its 2 GPUs: use --numa_binding=node, or allow more CPUs");
  // Without GPUs the ranks, not GPUs, share the node (the message counted them as GPUs).
  auto ranks = PlanBinding(t, {BindMode::kNumaExclusive, 2, Cpus("0"), {}});
  REQUIRE_FALSE(ranks.ok());
  CHECK(ranks.status().message().find("for its 2 local ranks (no GPU locality known)") !=
        std::string::npos);
}

TEST_CASE("numa binding core-complex: one L3 group each, the fullest groups first") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kNumaCoreComplex, 8, AllCpus(t), TwoSocketGpuNodes());
  CHECK(FormatCpuList(plan.ranks[0]) == "0-1,16-17");
  CHECK(FormatCpuList(plan.ranks[1]) == "2-3,18-19");
  CHECK(FormatCpuList(plan.ranks[7]) == "14-15,30-31");
  // Without CPU 17 the first group has 3 allowed CPUs: the full one goes first.
  plan = Plan(t, BindMode::kNumaCoreComplex, 2, Cpus("0-16,18-31"), TwoSocketGpuNodes());
  CHECK(Texts(plan) == std::vector<std::string>{"2-3,18-19", "0-1,16"});
}

TEST_CASE("numa binding core-complex: more GPUs than L3 groups share them round robin") {
  const Topology t = Load("one_socket");
  auto plan = Plan(t, BindMode::kNumaCoreComplex, 3, AllCpus(t), {-1, -1, -1});
  CHECK(Texts(plan) == std::vector<std::string>{"0-7", "0-7", "0-7"});
}

TEST_CASE("numa binding: a GPU without a NUMA node (-1) counts as node 0, as in torchrun") {
  const Topology t = Load("one_socket");
  auto plan = Plan(t, BindMode::kNumaNode, 2, Cpus("0-5"), {-1, -1});
  CHECK(Texts(plan) == std::vector<std::string>{"0-5", "0-5"});
}

TEST_CASE("numa binding: a GPU node with none of the allowed CPUs is refused") {
  const Topology t = Load("two_socket");
  auto plan = PlanBinding(t, {BindMode::kNumaNode, 8, Cpus("0-7,16-23"), TwoSocketGpuNodes()});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message() ==
        "--numa_binding=node: local rank 4 belongs to NUMA node 2, which has none of the allowed "
        "CPUs 0-7,16-23: run ddprun with an affinity (taskset, cpuset) that includes node 2, or "
        "use --cpu_binding");
}

TEST_CASE("numa binding without GPU information lays ranks over the nodes in blocks") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kNumaNode, 8, AllCpus(t));
  for (int r = 0; r < 8; ++r) CHECK(NodeOf(t, plan.ranks[r]) == r / 2);
  REQUIRE(plan.notes.size() == 1);
  CHECK(plan.notes[0].find("no GPU locality known") != std::string::npos);
  plan = Plan(t, BindMode::kNumaExclusive, 2, AllCpus(t));
  CHECK(Texts(plan) == std::vector<std::string>{"0-3,16-19", "8-11,24-27"});
  // One node: nothing to say.
  CHECK(Plan(Load("one_socket"), BindMode::kNumaNode, 2, Cpus("0-7")).notes.empty());
}

TEST_CASE("cpu binding compact: equal runs, whole cores first, filled from the first node") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kCompact, 4, AllCpus(t));
  CHECK(Texts(plan) ==
        std::vector<std::string>{"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"});
  plan = Plan(t, BindMode::kCompact, 16, AllCpus(t));
  CHECK(FormatCpuList(plan.ranks[0]) == "0,16");
  CHECK(FormatCpuList(plan.ranks[15]) == "15,31");
}

TEST_CASE("cpu binding compact: odd counts give the first ranks one CPU more") {
  const Topology t = Load("one_socket");
  auto plan = Plan(t, BindMode::kCompact, 3, AllCpus(t));
  CHECK(Texts(plan) == std::vector<std::string>{"0-1,4", "2,5-6", "3,7"});
}

TEST_CASE("cpu binding compact: with every GPU node known, runs go in GPU node order") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kCompact, 4, AllCpus(t), {3, 2, 1, 0});
  CHECK(Texts(plan) ==
        std::vector<std::string>{"12-15,28-31", "8-11,24-27", "4-7,20-23", "0-3,16-19"});
}

TEST_CASE("cpu binding spread: ranks balanced over the nodes in blocks, shares within a node") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kSpread, 6, AllCpus(t));
  const int nodes[] = {0, 0, 1, 1, 2, 3};
  for (int r = 0; r < 6; ++r) CHECK(NodeOf(t, plan.ranks[r]) == nodes[r]);
  CHECK(Texts(plan) == std::vector<std::string>{"0-1,16-17", "2-3,18-19", "4-5,20-21", "6-7,22-23",
                                                "8-11,24-27", "12-15,28-31"});
}

TEST_CASE("cpu binding spread: each rank on its GPU's node") {
  const Topology t = Load("two_socket");
  auto gpus = TwoSocketGpuNodes();
  std::reverse(gpus.begin(), gpus.end());
  auto plan = Plan(t, BindMode::kSpread, 8, AllCpus(t), gpus);
  for (int r = 0; r < 8; ++r) CHECK(NodeOf(t, plan.ranks[r]) == 3 - r / 2);
  CHECK(FormatCpuList(plan.ranks[0]) == "12-13,28-29");
  CHECK(Disjoint(plan));
  CHECK(plan.notes.empty());
}

TEST_CASE("cpu binding spread: a GPU node too small for its ranks spills the rest, disjointly") {
  const Topology t = Load("two_socket");
  const CpuList allowed = Cpus("0-3,4,16-19");  // node 0 whole, node 1 only CPU 4
  auto plan = Plan(t, BindMode::kSpread, 4, allowed, {1, 1, 0, 0});
  CHECK(Texts(plan) == std::vector<std::string>{"4", "0-1,16", "2,17-18", "3,19"});
  CHECK(Disjoint(plan));
  REQUIRE(plan.notes.size() == 1);
  CHECK(plan.notes[0] ==
        "local rank 1 placed off its GPU's NUMA node 1: that node has too few allowed CPUs");
}

TEST_CASE("cpu binding spread: fewer ranks than nodes take whole nodes") {
  const Topology t = Load("two_socket");
  auto plan = Plan(t, BindMode::kSpread, 2, AllCpus(t));
  CHECK(Texts(plan) == std::vector<std::string>{"0-7,16-23", "8-15,24-31"});
}

TEST_CASE("cpu binding with more ranks than allowed CPUs shares them and warns") {
  const Topology t = Load("one_socket");
  for (BindMode mode : {BindMode::kSpread, BindMode::kCompact}) {
    auto plan = Plan(t, mode, 2, Cpus("0"));
    CHECK(Texts(plan) == std::vector<std::string>{"0", "0"});
    REQUIRE(plan.warnings.size() == 1);
    CHECK(plan.warnings[0] == BindModeName(mode) +
                                  ": 1 allowed CPU(s) (0) for 2 local ranks: ranks share CPUs, "
                                  "one CPU each; allow at least 2 CPUs or run fewer workers");
  }
  auto plan = Plan(t, BindMode::kCompact, 5, Cpus("0-1,4"));
  CHECK(Texts(plan) == std::vector<std::string>{"0", "4", "1", "0", "4"});
}

TEST_CASE("binding refuses an allowed set outside the topology") {
  auto plan = PlanBinding(Load("one_socket"), {BindMode::kSpread, 1, Cpus("8-9"), {}});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message().find("none of the allowed CPUs 8-9") != std::string::npos);
}

TEST_CASE("cpu binding: any allowed set and rank count give non-empty, allowed, disjoint shares") {
  const Topology t = Load("two_socket");
  std::mt19937 gen(7);
  for (int trial = 0; trial < 500; ++trial) {
    CpuList allowed;
    for (int c = 0; c < 32; ++c) {
      if (gen() % 3 != 0) allowed.push_back(c);
    }
    if (allowed.empty()) continue;
    const int nproc = 1 + static_cast<int>(gen() % 40);
    std::vector<std::optional<int>> gpus;
    if (gen() % 2 == 0) {
      for (int r = 0; r < nproc; ++r) gpus.emplace_back(static_cast<int>(gen() % 4));
    }
    for (BindMode mode : {BindMode::kSpread, BindMode::kCompact}) {
      CAPTURE(trial);
      CAPTURE(nproc);
      CAPTURE(FormatCpuList(allowed));
      auto plan = Plan(t, mode, nproc, allowed, gpus);
      CHECK(Within(plan, allowed));
      const bool enough = static_cast<int>(allowed.size()) >= nproc;
      CHECK(Disjoint(plan) == enough);
      CHECK(plan.warnings.empty() == enough);
    }
  }
}

TEST_CASE("binding threads per rank divide a CPU set among the ranks bound to it") {
  CHECK(ThreadsPerRank({{0, 1, 2, 3}, {4, 5}, {6}}) == std::vector<int>{4, 2, 1});
  CHECK(ThreadsPerRank({{0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6}}) == std::vector<int>{2, 2, 3});
  CHECK(ThreadsPerRank({{0}, {0}}) == std::vector<int>{1, 1});
}

TEST_CASE("binding plan description names each local rank's CPUs") {
  BindingPlan plan;
  plan.ranks = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  CHECK(DescribePlan(plan) == "local rank 0: 0-3, local rank 1: 4-7");
}

}  // namespace
}  // namespace ddprun::env
