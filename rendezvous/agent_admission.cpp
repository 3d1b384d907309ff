// An agent's admission to the job: the settings every node must share, and
// under static its node rank's claim (claiming it, watching a holder that may
// be dead, taking it over, getting it back). Part of AgentMachine
// (agent_machine.hpp).
#include "rendezvous/agent_machine.hpp"

#include <algorithm>

#include "base/exit_codes.hpp"

namespace ddprun::rendezvous {

namespace {

std::string Who(const StatusOr<NodeInfo>& node) {
  return node.ok() ? node->name + " (" + node->addr + ", agent " + node->agent_id + ")"
                   : std::string("another agent");
}

}  // namespace

std::optional<Action> AgentMachine::ClaimRank(Kv& kv, const JobRecord& rec, Time now) {
  if (!s_.rdzv.exclusive_ranks || s_.self.requested_rank < 0) return std::nullopt;
  const std::string mine = s_.self.Encode();
  const std::string rank = std::to_string(s_.self.requested_rank);
  const std::string key = keys_.Claim(s_.self.requested_rank);
  const auto limit = s_.rdzv.KeepAliveLimit();
  if (rank_claimed_) {
    // Still ours, unless an agent started in our place took it while this
    // one was silent (stopped or starved past the keep-alive limit). Freed
    // meanwhile (that agent left): ours again.
    auto holder = kv.CompareSet(key, "", mine);
    if (!holder.ok()) return StoreGone(holder.status());
    if (*holder == mine) {
      if (phase_ == Phase::kWaitRound && round_ == rec.round + 1 &&
          rec.Withdrew(s_.self.agent_id)) {
        // The agent that took the rank withdrew this one's arrival, then left.
        auto back =
            Apply(kv, [&](const JobRecord& r) { return Rejoin(r, round_, s_.self.agent_id); });
        if (!back.ok()) return StoreGone(back.status());
      }
      return std::nullopt;
    }
    Exit(1, "node rank " + rank + " was taken over by " + Who(NodeInfo::Decode(*holder)) +
                " while this agent sent no keep-alive for " + DurationText(limit) +
                " (it was stopped or starved): the job goes on without this agent");
    done_.displaced = true;
    return done_;
  }
  auto holder = kv.CompareSet(key, "", mine);
  if (!holder.ok()) return StoreGone(holder.status());
  if (*holder == mine) {
    rank_claimed_ = true;
    return std::nullopt;
  }
  auto other = NodeInfo::Decode(*holder);
  auto beats = kv.Add(keys_.KeepAlive(other.ok() ? other->agent_id : *holder), 0);
  if (!beats.ok()) return StoreGone(beats.status());
  // The job found the holder lost already (silent past the limit while its
  // round ran): its place is free now, whatever it does next.
  const bool lost =
      other.ok() &&
      ((rec.end != RoundEnd::kNone && rec.lost_agent == other->agent_id) ||
       (rec.MemberRank(other->agent_id) >= 0 && rec.gone[rec.MemberRank(other->agent_id)]));
  if (!lost && (!contest_ || contest_->holder != *holder)) {
    // Is the holder alive? Its keep-alive counter says so within one interval.
    contest_ = Contest{*holder, *beats, now};
    return std::nullopt;
  }
  if (lost || *beats == contest_->beats) {
    if (!lost && now - contest_->since < limit) return std::nullopt;
    // Silent past the limit, as the coordinator loses a member: killed, or
    // stopped. This agent takes its place.
    auto taken = kv.CompareSet(key, *holder, mine);
    if (!taken.ok()) return StoreGone(taken.status());
    contest_.reset();
    if (*taken != mine) return std::nullopt;  // changed meanwhile: look again
    rank_claimed_ = true;
    const std::string why = "node rank " + rank + "'s agent " + Who(other) +
                            " sent no keep-alive for " + DurationText(limit) +
                            " and was replaced by " + s_.self.name + " (" + s_.self.addr +
                            ", agent " + s_.self.agent_id + ")";
    if (other.ok()) WithdrawDisplaced(kv, *other, why);
    Action told = Wait(now);
    told.message = why;
    return told;
  }
  Cause c;
  c.cls = FailureClass::kRendezvous;
  c.node = s_.self.name;
  c.what = "node rank " + rank + " was claimed twice: by " + Who(other) + ", then by " +
           s_.self.name + " (" + s_.self.addr + ", agent " + s_.self.agent_id +
           "), which was refused while the first sends keep-alives: give every node its own "
           "--node_rank (under Slurm, run one agent per node with srun --ntasks-per-node=1 and "
           "leave --node_rank to ddprun); an agent started in place of a killed one takes its "
           "rank once the killed one has sent no keep-alive for " +
           DurationText(limit);
  auto applied = Apply(kv, [&](const JobRecord& r) { return CloseJob(r, c); });
  if (!applied.ok()) return StoreGone(applied.status());
  if (applied->record.final()) return ExitByRecord(applied->record);
  return Exit(1, c.what);
}

Action AgentMachine::JobOver(Kv& kv, const JobRecord& rec) {
  ExitByRecord(rec);
  if (!rank_claimed_ || rec.outcome == JobOutcome::kFailed) return done_;
  // Best effort, as the job is over: only what the store still holds.
  auto holder = kv.TryGet(keys_.Claim(s_.self.requested_rank));
  if (!holder.ok() || !*holder || (*holder)->empty() || **holder == s_.self.Encode()) return done_;
  const auto limit = s_.rdzv.KeepAliveLimit();
  done_.message = "node rank " + std::to_string(s_.self.requested_rank) + " was taken over by " +
                  Who(NodeInfo::Decode(**holder)) + " while this agent sent no keep-alive for " +
                  DurationText(limit) +
                  " (it was stopped or starved), and the job succeeded without this agent";
  done_.displaced = true;
  return done_;
}

void AgentMachine::WithdrawDisplaced(Kv& kv, const NodeInfo& holder, const std::string& reason) {
  // Best effort: should it fail, the coordinator does not count an arrival
  // that no longer holds its rank anyway.
  auto rec = Read(kv);
  if (!rec.ok()) return;
  const int r = rec->round + 1;
  auto joined = JoinedAgents(kv, keys_, r);
  if (!joined.ok() || std::find(joined->begin(), joined->end(), holder.agent_id) == joined->end()) {
    return;
  }
  (void)Apply(kv, [&](const JobRecord& cur) {
    return Withdraw(cur, r, holder.agent_id, reason, s_.rdzv.min_nodes, *joined,
                    s_.rdzv.max_restarts);
  });
}

std::optional<Action> AgentMachine::CheckSettings(Kv& kv, const JobRecord& rec) {
  if (settings_checked_) return std::nullopt;
  const RendezvousSettings& r = s_.rdzv;
  const std::string mine = "--nnodes=" + std::to_string(r.min_nodes) +
                           (r.min_nodes == r.max_nodes ? "" : ":" + std::to_string(r.max_nodes)) +
                           " --max_restarts=" + std::to_string(s_.rdzv.max_restarts) +
                           (s_.role == "default" ? "" : " --role=" + s_.role);
  auto stored = kv.CompareSet(keys_.Settings(), "", mine + "\n" + s_.self.name);
  if (!stored.ok()) return StoreGone(stored.status());
  const size_t newline = stored->find('\n');
  const std::string theirs = stored->substr(0, newline);
  if (theirs == mine) {
    settings_checked_ = true;
    return std::nullopt;
  }
  const std::string host = newline == std::string::npos ? "" : stored->substr(newline + 1);
  const std::string why =
      mine + " differ from the job's " + theirs + " (given by the first agent to join, on " + host +
      "): every node must give the same --nnodes, --max_restarts and --role, or the nodes would "
      "disagree on the job's size, on when it fails, and on the ranks within a role (ddprun runs "
      "one role per job: ROLE_RANK and ROLE_WORLD_SIZE are RANK and WORLD_SIZE)";
  if (s_.rdzv.exclusive_ranks && rec.round < 0) {
    // Static, before the first round: the job cannot form without this
    // node; the others would wait for it until the join timeout. The whole
    // job fails, naming it. (Once a round formed, a stray agent leaves alone.)
    Cause c;
    c.cls = FailureClass::kRendezvous;
    c.exit_code = exit_code::kUsage;
    c.node = s_.self.name;
    c.what = "the node " + s_.self.name + " (" + s_.self.addr + ") was refused: its " + why;
    auto applied = Apply(kv, [&](const JobRecord& r) { return CloseJob(r, c); });
    if (!applied.ok()) return StoreGone(applied.status());
    if (applied->record.final() && applied->record.final_cause.what != c.what) {
      return ExitByRecord(applied->record);  // the job had failed already
    }
  }
  return Exit(exit_code::kUsage, "this node's " + why);
}

}  // namespace ddprun::rendezvous
