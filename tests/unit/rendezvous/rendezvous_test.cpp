#include "rendezvous/rendezvous.hpp"

#include <doctest/doctest.h>

namespace ddprun::rendezvous {
namespace {

NodeInfo Node(const std::string& id, const std::string& name, int requested = -1) {
  NodeInfo n;
  n.agent_id = id;
  n.name = name;
  n.addr = name + ".example";
  n.nproc = 2;
  n.requested_rank = requested;
  return n;
}

std::vector<std::string> Ids(const std::vector<NodeInfo>& nodes) {
  std::vector<std::string> ids;
  for (const auto& n : nodes) ids.push_back(n.agent_id);
  return ids;
}

TEST_CASE("node records survive encoding") {
  NodeInfo n = Node("a_1_2", "host-a", 3);
  auto back = NodeInfo::Decode(n.Encode());
  REQUIRE(back.ok());
  CHECK(back->agent_id == "a_1_2");
  CHECK(back->addr == "host-a.example");
  CHECK(back->requested_rank == 3);
  CHECK_FALSE(NodeInfo::Decode("only\tthree\tfields").ok());
  CHECK_FALSE(NodeInfo::Decode("a\tb\tc\tx\t1").ok());
  auto members = DecodeMembers(EncodeMembers({Node("x", "h1"), Node("y", "h2")}));
  REQUIRE(members.ok());
  CHECK(Ids(*members) == std::vector<std::string>{"x", "y"});
}

TEST_CASE("ranks go by host name, then arrival, when none is requested") {
  auto ranked = AssignRanks(
      {Node("1", "node-c"), Node("2", "node-a"), Node("3", "node-b"), Node("4", "node-a")});
  CHECK(Ids(ranked) == std::vector<std::string>{"2", "4", "3", "1"});
}

TEST_CASE("requested node ranks are honoured; the rest fill the gaps in order") {
  auto ranked = AssignRanks({Node("1", "a"), Node("2", "z", 0), Node("3", "b"), Node("4", "c", 2)});
  CHECK(Ids(ranked) == std::vector<std::string>{"2", "1", "4", "3"});
}

TEST_CASE("a requested rank that is taken or out of range falls back to the order") {
  auto ranked = AssignRanks({Node("1", "b", 0), Node("2", "a", 0), Node("3", "c", 9)});
  CHECK(Ids(ranked) == std::vector<std::string>{"1", "2", "3"});
}

TEST_CASE("keys are namespaced by run id and round") {
  RendezvousKeys k("job7");
  CHECK(k.Node(2, 5) == "rdzv/job7/r2/node/5");
  CHECK(k.Cleared(0) == "rdzv/job7/r0/cleared");
  CHECK(k.KeepAlive("a") == "rdzv/job7/ka/a");
  CHECK(RendezvousKeys("other").Job() != k.Job());
}

}  // namespace
}  // namespace ddprun::rendezvous
