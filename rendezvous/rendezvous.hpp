// The pieces every rendezvous party shares: a node's record (NodeInfo), the
// settings from --rdzv_conf, a round as one agent sees it, the store keys,
// and how a closing round orders its members.
//
// The protocol itself: agents join round N by bumping "r<N>/join" and
// writing their NodeInfo under "r<N>/node/<arrival>"; the coordinator on the
// store host closes the round in the job record (job_record.hpp), which is
// the only place decisions live; agents beat "ka/<agent id>" so that the
// coordinator can tell a lost node; node rank 0 says "r<N>/cleared" once it
// emptied the workers' key space of the store. Every key is under
// "rdzv/<run_id>/", in the store's agents' key space.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"

namespace ddprun::rendezvous {

struct NodeInfo {
  std::string agent_id;  // host_pid_random, unique per agent
  std::string name;      // host name, for ordering
  std::string addr;      // how other nodes reach this one
  int nproc = 1;
  int requested_rank = -1;

  std::string Encode() const;
  static StatusOr<NodeInfo> Decode(const std::string& text);
};

struct RendezvousSettings {
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds join_timeout{600000};
  std::chrono::milliseconds last_call_timeout{30000};
  std::chrono::milliseconds keep_alive_interval{5000};
  int keep_alive_max_attempt = 3;
  // The longest wait a setting gives (10^9 s, as the option check allows):
  // a product of two settings saturates there, for the clock's nanoseconds
  // overflow at 9.2e9 s (attack 114: 1e9 s x 10 attempts took every node for
  // silent at once, and no round formed).
  static constexpr std::chrono::milliseconds kLongestWait{std::chrono::seconds(1000000000)};
  // How long an agent may be silent before the others take it for lost.
  std::chrono::milliseconds KeepAliveLimit() const {
    const int attempts = keep_alive_max_attempt < 1 ? 1 : keep_alive_max_attempt;
    if (keep_alive_interval.count() > kLongestWait.count() / attempts) return kLongestWait;
    return keep_alive_interval * attempts;
  }
  std::chrono::milliseconds read_timeout{60000};
  // How long an agent waits for the store to come up at its start: the
  // read_timeout (c10d), the join timeout (static), as torchrun's clients do.
  std::chrono::milliseconds connect_timeout{60000};
  std::string token;
  // Static backend: a node's requested rank is its alone. The first agent to
  // claim a rank holds it (the Claim key); a second claimant fails the job
  // while the holder's keep-alives go on, and takes its place once the holder
  // has been silent for the keep-alive limit (killed, then started again).
  // The coordinator counts an arrival only while it holds its rank's claim.
  bool exclusive_ranks = false;
  // The --rdzv_conf key a user gives for join_timeout: static reads "timeout".
  const char* JoinTimeoutName() const { return exclusive_ranks ? "timeout" : "join_timeout"; }
  // --max_restarts, the job's: failures end a round with one used (and the
  // job when none is left), as does a loss that leaves fewer than min_nodes.
  int max_restarts = 0;
};

struct RoundResult {
  int round = 0;
  int node_rank = 0;
  std::vector<NodeInfo> nodes;  // in rank order
  int world_size = 0;
  int base_rank = 0;      // global rank of this node's local rank 0
  int restart_count = 0;  // the record's, the same for every member
  // Why this node's previous round ended ("round 0 ended: failure on node 1
  // (...): rank 3 ... exit code 7"), told when it restarts; "" for its first.
  std::string previous_end;
};

// Key names, shared by agents and the coordinator.
class RendezvousKeys {
 public:
  explicit RendezvousKeys(const std::string& run_id) : p_("rdzv/" + run_id + "/") {}
  // The run id of the job whose coordinator runs on this store.
  static std::string HostedRunId() { return "rdzv/hosted_run_id"; }
  // The job record (job_record.hpp).
  std::string Job() const { return p_ + "job"; }
  // Set after the record reached `version`: a wait on the next one wakes at
  // once when the record changes.
  std::string Version(int64_t version) const { return p_ + "v/" + std::to_string(version); }
  // Set by an agent as it exits, having read the job's outcome.
  std::string Left(const std::string& agent) const { return p_ + "left/" + agent; }
  // Counts the agents that left (each adds 1 after its Left key): what a
  // store host that never joined (its node could not start) waits for.
  std::string Departed() const { return p_ + "departed"; }
  std::string KeepAlive(const std::string& agent) const { return p_ + "ka/" + agent; }
  std::string Join(int r) const { return R(r) + "join"; }
  std::string Node(int r, int i) const { return R(r) + "node/" + std::to_string(i); }
  std::string Cleared(int r) const { return R(r) + "cleared"; }
  // The arrivals of round `r` the coordinator does not count as silent past
  // the keep-alive limit: their agent ids, one per line (what the waiting
  // agents tell).
  std::string Silent(int r) const { return R(r) + "silent"; }
  // The n-th change (from 1) of what holds the workers of round `r`'s nodes
  // (rendezvous/pause_board.hpp).
  std::string Pause(int r, int64_t n) const { return R(r) + "pause/" + std::to_string(n); }
  // Static backend: the agent that holds node rank `rank` (its NodeInfo).
  std::string Claim(int rank) const { return p_ + "claim/" + std::to_string(rank); }
  // The settings every agent must share ("--nnodes=1:2 --max_restarts=3"),
  // as the first agent to join gave them, then a newline and its host.
  std::string Settings() const { return p_ + "settings"; }

 private:
  std::string R(int r) const { return p_ + "r" + std::to_string(r) + "/"; }
  std::string p_;
};

// Orders the members of a closing round: requested ranks first where valid
// and unique, the rest by host name then arrival.
std::vector<NodeInfo> AssignRanks(std::vector<NodeInfo> by_arrival);
std::string EncodeMembers(const std::vector<NodeInfo>& nodes);
StatusOr<std::vector<NodeInfo>> DecodeMembers(const std::string& text);

}  // namespace ddprun::rendezvous
