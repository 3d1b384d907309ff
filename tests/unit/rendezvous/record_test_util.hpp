// What the job record's and the machines' tests share: members, agent
// settings, worker causes and a closed round, made up.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/job_record.hpp"

namespace ddprun::rendezvous::record_test {

inline NodeInfo Member(const std::string& id) {
  NodeInfo n;
  n.agent_id = id;
  n.name = "host-" + id;
  n.addr = "10.0.0." + id;
  n.nproc = 2;
  return n;
}

// An agent of `rdzv` named `id`; agent "0" hosts the store.
inline AgentSettings For(const RendezvousSettings& rdzv, const std::string& id) {
  AgentSettings s;
  s.rdzv = rdzv;
  s.self = Member(id);
  s.hosts_store = id == "0";
  return s;
}

inline Cause WorkerCause(int code) {
  Cause c;
  c.cls = FailureClass::kWorker;
  c.exit_code = code;
  c.node_rank = 1;
  c.node = "host-b";
  c.rank = 3;
  c.local_rank = 1;
  c.pid = 4242;
  c.what = "rank 3 (local_rank 1, pid 4242) exit code " + std::to_string(code);
  return c;
}

inline JobRecord Closed(int members) {
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < members; ++i) nodes.push_back(Member(std::to_string(i)));
  auto rec = CloseRound(JobRecord(), 0, nodes);
  REQUIRE(rec.ok());
  return *rec;
}

}  // namespace ddprun::rendezvous::record_test
