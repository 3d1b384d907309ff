// Rendezvous of the agents of one job on the store, in rounds.
//
// One agent, the store host, runs the Coordinator (coordinator.hpp); every
// agent (the host too) joins rounds through Rendezvous. A round closes when
// MAX agents joined, or MIN joined and the last call expired; node ranks are
// the requested --node_rank where given, else by host name then arrival.
// Node rank 0's worker store is MASTER_ADDR:MASTER_PORT for every worker.
//
// Keys, all under "rdzv/<run_id>/": round (current open round, a counter),
// r<N>/join (arrival counter), r<N>/node/<i> (NodeInfo by arrival),
// r<N>/result (the members in rank order), r<N>/cleared (rank 0 emptied its
// worker store), r<N>/end (why the round ends), r<N>/done/<rank>,
// r<N>/exit/<rank>, ka/<agent id> (keep-alive counters), closed (why the job
// is over for every agent: "<exit code> <message>").
//
// Thread-compatible: one Rendezvous per thread; it owns its store connection.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::rendezvous {

struct NodeInfo {
  std::string agent_id;  // host_pid_random, unique per agent
  std::string name;      // host name, for ordering
  std::string addr;      // how other nodes reach this one
  int nproc = 1;
  int requested_rank = -1;
  int worker_store_port = 0;

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
  std::chrono::milliseconds read_timeout{60000};
  std::string token;
};

struct RoundResult {
  int round = 0;
  int node_rank = 0;
  std::vector<NodeInfo> nodes;  // in rank order
  int world_size = 0;
  int base_rank = 0;  // global rank of this node's local rank 0
};

// Key names, shared by agents and the coordinator.
class RendezvousKeys {
 public:
  explicit RendezvousKeys(const std::string& run_id) : p_("rdzv/" + run_id + "/") {}
  // The run id of the job whose coordinator runs on this store.
  static std::string HostedRunId() { return "rdzv/hosted_run_id"; }
  std::string Round() const { return p_ + "round"; }
  std::string Closed() const { return p_ + "closed"; }
  std::string Leaving() const { return p_ + "leaving"; }
  std::string KeepAlive(const std::string& agent) const { return p_ + "ka/" + agent; }
  std::string Join(int r) const { return R(r) + "join"; }
  std::string Node(int r, int i) const { return R(r) + "node/" + std::to_string(i); }
  std::string Result(int r) const { return R(r) + "result"; }
  std::string Cleared(int r) const { return R(r) + "cleared"; }
  std::string End(int r) const { return R(r) + "end"; }
  std::string Done(int r, int rank) const { return R(r) + "done/" + std::to_string(rank); }
  std::string Exit(int r, int rank) const { return R(r) + "exit/" + std::to_string(rank); }

 private:
  std::string R(int r) const { return p_ + "r" + std::to_string(r) + "/"; }
  std::string p_;
};

// Orders the members of a closing round: requested ranks first where valid
// and unique, the rest by host name then arrival.
std::vector<NodeInfo> AssignRanks(std::vector<NodeInfo> by_arrival);
std::string EncodeMembers(const std::vector<NodeInfo>& nodes);
StatusOr<std::vector<NodeInfo>> DecodeMembers(const std::string& text);

class Rendezvous {
 public:
  static StatusOr<Rendezvous> Connect(const std::string& host, int port,
                                      RendezvousSettings settings, NodeInfo self);

  // Joins the next round and waits for it to close. Fails when the job is
  // closed (the message and exit code of `closed`), or on join timeout.
  StatusOr<RoundResult> NextRound();
  // Rank 0 says its worker store is clean; everyone waits for that.
  Status MarkCleared(int round);
  Status WaitCleared(int round);
  // Ends the round for everyone (a worker failure, an agent leaving).
  Status EndRound(int round, const std::string& reason);
  // The reason the round ended, if it did.
  StatusOr<std::optional<std::string>> RoundEnd(int round);
  // Ends the job for every agent: "<exit code> <message>".
  Status Close(int exit_code, const std::string& message);
  // Local workers succeeded; waits until every node's did (true), or the
  // round ended for another reason (false).
  StatusOr<bool> FinishRound(const RoundResult& round);
  // The store host, after the job finished: waits (bounded) until every
  // member has read that it did, so the store outlives their last requests.
  void WaitExits(const RoundResult& round, std::chrono::milliseconds timeout);
  // An agent leaving because the job is over says so (once) ...
  void AnnounceLeaving();
  // ... and the store host waits (bounded) for the others that joined the
  // last round it knows of, so that they read why the job ended before the
  // store goes away.
  void WaitOthersLeaving(int others, std::chrono::milliseconds timeout);
  // Agents that joined the round this agent last joined, itself included.
  int JoinedLastRound();

  const RendezvousKeys& keys() const { return keys_; }
  const RendezvousSettings& settings() const { return settings_; }
  const NodeInfo& self() const { return self_; }
  StoreClient& client() { return client_; }

 private:
  Rendezvous(StoreClient client, RendezvousSettings settings, NodeInfo self)
      : client_(std::move(client)),
        settings_(std::move(settings)),
        self_(std::move(self)),
        keys_(settings_.run_id) {}
  StatusOr<std::optional<RoundResult>> TryRound(int round);
  Status CheckClosed();
  // Fails at once when the store's host coordinates another job.
  Status CheckHostedJob();
  bool checked_host_ = false;

  StoreClient client_;
  RendezvousSettings settings_;
  NodeInfo self_;
  RendezvousKeys keys_;
  int last_round_ = -1;
  bool announced_ = false;
};

// Parses a `closed` value into its exit code and message.
void ParseClosed(const std::string& value, int* exit_code, std::string* message);

}  // namespace ddprun::rendezvous
