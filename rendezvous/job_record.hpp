// The job record: the one recorded truth of an elastic job, a typed value
// under one store key ("rdzv/<run_id>/job"), changed only by compare-and-set.
//
// It holds what every agent must agree on: the last round that closed and
// its members in rank order, the restart count its workers run with
// (TORCHELASTIC_RESTART_COUNT), why that round ended (a worker failure with
// its root cause, or a membership change), which members' workers finished,
// and the job's outcome. Agents act on what the record says, never on local
// guesses (docs/elastic-invariants.md lists the invariants this enforces).
//
// Transitions are pure functions: each takes the current record and returns
// the next one, or an error saying why the transition does not apply (the
// round already ended, the job is over). A record whose outcome is succeeded
// or failed is final: every transition rejects it. Every accepted transition
// bumps `version`, so a compare-and-set of the encoded text succeeds only
// against the value it was computed from.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "rendezvous/kv.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::rendezvous {

// What kind of failure a cause is; it decides which failure is the root cause
// and which exit code every agent returns.
enum class FailureClass {
  kWorker,      // a worker exited non-zero or died of a signal
  kHang,        // a worker was declared hung (exit 124)
  kPeer,        // a worker died because a peer went away (SIGPIPE, reset)
  kRendezvous,  // a round could not form (timeout, fewer than MIN nodes)
  kSignal,      // the agent hosting the store was stopped by a signal
  kExitHang,    // a worker whose program had finished did not exit (exit 124, never restarted)
  kExitCrash,   // a worker whose program had finished crashed on its way out (never restarted)
};
const char* FailureClassName(FailureClass c);
// A worker whose program had finished (kExitHang, kExitCrash): a restart would run it again.
bool FinishedProgram(FailureClass c);

struct Cause {
  FailureClass cls = FailureClass::kWorker;
  int exit_code = 1;   // what every agent exits with
  int node_rank = -1;  // -1: not one node's
  std::string node;    // host name
  int rank = -1;       // global rank of the worker, -1: none
  int local_rank = -1;
  int pid = 0;
  std::string what;  // "rank 3 (local_rank 1, pid 4242) exit code 7"

  // "node 1 (host-b): rank 3 (local_rank 1, pid 4242) exit code 7"
  std::string Describe() const;
};

// A round ended by a membership change (kMembership, kNewNodes: new agents
// wait to join) is soft: a member whose workers had already succeeded may
// still say so, and when all had, the job succeeded (the change came too late
// to matter). A failure is not: the round is over.
enum class RoundEnd { kNone, kFailure, kMembership, kNewNodes };
enum class JobOutcome { kRunning, kSucceeded, kFailed };

// An agent that joined the round being gathered and left before it closed
// (stopped by a signal): the round closes without it.
struct Withdrawal {
  std::string agent_id;
  std::string reason;  // "the agent on host-b (...) was stopped by SIGTERM"
};

struct JobRecord {
  int64_t version = 0;            // bumped by every transition; 0: nothing recorded yet
  int round = -1;                 // the last round that closed; -1: none yet
  std::vector<NodeInfo> members;  // of `round`, in node rank order
  int restarts = 0;               // failure restarts used before `round` started
  std::string restart_cause;      // what used the last of them ("node 1 (host-b): rank 3 ...")
  RoundEnd end = RoundEnd::kNone;
  Cause cause;              // end == kFailure: the root cause
  std::string end_reason;   // kMembership, kNewNodes: "lost host-b (...)"
  std::string lost_agent;   // end == kMembership: the agent declared lost, if one
  std::vector<bool> done;   // members whose workers all succeeded in `round`
  std::vector<bool> gone;   // members lost after others' workers finished: not awaited
  std::string gone_reason;  // why they are gone ("lost host-b (...): no keep-alive ...")
  JobOutcome outcome = JobOutcome::kRunning;
  Cause final_cause;  // outcome == kFailed: the root cause every agent reports
  // Agents that joined round `round` + 1 and left before it closed; emptied
  // when it closes.
  std::vector<Withdrawal> withdrawn;

  bool final() const { return outcome != JobOutcome::kRunning; }
  // The exit code of a final record: 0, or the root cause's.
  int exit_code() const;
  // Whether `round` is closed and still running (not ended, job not over).
  bool Running(int r) const { return round == r && end == RoundEnd::kNone && !final(); }
  int MemberRank(const std::string& agent_id) const;  // -1 when not a member
  bool Withdrew(const std::string& agent_id) const;   // from round `round` + 1
  int world_size() const;

  std::string Encode() const;
  // "" decodes as the empty record (nothing written yet).
  static StatusOr<JobRecord> Decode(const std::string& text);
};

// The transitions. Each returns the next record (version + 1), or kAborted
// with why it does not apply to `rec` (the caller then acts on `rec`).

// Round `r` closes with `members`; requires the previous round to have ended
// and no member to have withdrawn.
StatusOr<JobRecord> CloseRound(const JobRecord& rec, int r, std::vector<NodeInfo> members);
// A worker failure ends round `r`: one restart is used, and the job fails
// with `cause` when none is left. Membership changes use one only when they
// leave too few nodes (EndRoundByMembership).
StatusOr<JobRecord> EndRoundByFailure(const JobRecord& rec, int r, const Cause& cause,
                                      int max_restarts);
// A membership change ends round `r` (a member lost or leaving, new nodes
// waiting). `lost_agent`, when given, leaves the job. When fewer than
// `min_nodes` remain of the members and the agents `joining` round `r` + 1,
// the round ends as by a failure (kFailure, one restart used: the next round
// waits join_timeout for nodes, as torchrun's), or the job fails when none of
// `max_restarts` is left. A member whose workers finished is never lost.
// `also_lost`: members found lost with it (silent past the limit too), not
// counted among those that remain.
StatusOr<JobRecord> EndRoundByMembership(const JobRecord& rec, int r, const std::string& reason,
                                         const std::string& lost_agent, int min_nodes,
                                         const std::vector<std::string>& joining = {},
                                         int max_restarts = 0,
                                         const std::vector<std::string>& also_lost = {});
// Members of the round before round `r` (gathering) were lost before they
// joined it (silent past the keep-alive limit: killed with another member
// whose loss ended that round, say): when that round ended without a
// restart (a membership change), with no restart of `max_restarts` left and
// fewer than `min_nodes` remaining of that round's members and the agents
// `joining`, the job fails, as had they been lost while it ran. (After a
// restart the round waits join_timeout for nodes: that covers them.)
// Rejected otherwise (the round gathers on, within join_timeout).
StatusOr<JobRecord> LoseBeforeRejoin(const JobRecord& rec, int r, const std::string& reason,
                                     const std::vector<std::string>& lost, int min_nodes,
                                     const std::vector<std::string>& joining, int max_restarts);
// The agent `agent_id`, which joined round `r` (not closed yet), leaves: the
// round closes without it (CloseRound rejects members that withdrew). When
// it was a member of the round before, and fewer than `min_nodes` remain of
// that round's members and the agents `joining` round `r`, the job fails
// unless a restart is left of `max_restarts` (the round then gathers on,
// within join_timeout).
StatusOr<JobRecord> Withdraw(const JobRecord& rec, int r, const std::string& agent_id,
                             const std::string& reason, int min_nodes,
                             const std::vector<std::string>& joining = {}, int max_restarts = 0);
// The agent `agent_id`, withdrawn from round `r` (not closed yet) by another
// (it took over the agent's node rank while it was stopped), holds its rank
// again (that agent left): its arrival counts again.
StatusOr<JobRecord> Rejoin(const JobRecord& rec, int r, const std::string& agent_id);
// New agents wait to join round `r` + 1: round `r` ends so it can re-form
// with them (no restart used).
StatusOr<JobRecord> EndRoundForNewNodes(const JobRecord& rec, int r, const std::string& reason);
// Member `node_rank`'s workers all succeeded in round `r` (which runs, or was
// ended by a membership change); the job succeeds when every member's did
// (or the member is gone, see ExcuseLost).
StatusOr<JobRecord> MarkDone(const JobRecord& rec, int r, int node_rank);
// Some members' workers all succeeded in round `r` and member `lost_agent`,
// whose had not said so, went silent past the keep-alive limit: the job no
// longer waits for it, and succeeds once every other member's workers did
// (as torchrun's agents exit 0 once their own workers did; the training is
// over, and a new round would run it again).
StatusOr<JobRecord> ExcuseLost(const JobRecord& rec, int r, const std::string& reason,
                               const std::string& lost_agent);
// The job fails for a reason outside a round (rendezvous timeout, the store
// host stopped by a signal).
StatusOr<JobRecord> CloseJob(const JobRecord& rec, const Cause& cause);

// Reading and changing the stored record.
StatusOr<JobRecord> ReadRecord(Kv& kv, const RendezvousKeys& keys);
// The agents that joined round `r` so far (withdrawn ones included).
StatusOr<std::vector<std::string>> JoinedAgents(Kv& kv, const RendezvousKeys& keys, int r);

struct Applied {
  JobRecord record;     // what the store holds now
  bool landed = false;  // whether this transition made it so
};
using Transition = std::function<StatusOr<JobRecord>(const JobRecord&)>;
// Applies `transition` to the stored record by compare-and-set, recomputing
// it when another writer got there first, until it lands or is rejected.
// Fails only when the store does (or holds a record it cannot decode).
StatusOr<Applied> ApplyTransition(Kv& kv, const RendezvousKeys& keys, const Transition& transition);

}  // namespace ddprun::rendezvous
