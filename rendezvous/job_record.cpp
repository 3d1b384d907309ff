#include "rendezvous/job_record.hpp"

#include <algorithm>
#include <charconv>
#include <set>

namespace ddprun::rendezvous {

namespace {

constexpr char kMagic[] = "ddprun-job/3";
constexpr char kMagicFamily[] = "ddprun-job/";

// Fields are "<decimal length>:<bytes>", so any text survives.
class FieldWriter {
 public:
  FieldWriter& Str(const std::string& s) {
    out_ += std::to_string(s.size()) + ":" + s;
    return *this;
  }
  FieldWriter& Int(int64_t v) { return Str(std::to_string(v)); }
  std::string& text() { return out_; }

 private:
  std::string out_;
};

class FieldReader {
 public:
  explicit FieldReader(const std::string& text) : text_(text) {}
  bool Str(std::string* out) {
    auto colon = text_.find(':', at_);
    size_t len = 0;
    if (colon == std::string::npos) return false;
    auto [p, ec] = std::from_chars(text_.data() + at_, text_.data() + colon, len);
    if (ec != std::errc() || p != text_.data() + colon || len > text_.size() - colon - 1) {
      return false;
    }
    *out = text_.substr(colon + 1, len);
    at_ = colon + 1 + len;
    return true;
  }
  template <typename T>
  bool Int(T* out) {
    std::string s;
    if (!Str(&s)) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
  }
  bool AtEnd() const { return at_ == text_.size(); }

 private:
  const std::string& text_;
  size_t at_ = 0;
};

void WriteCause(FieldWriter& w, const Cause& c) {
  w.Int(static_cast<int>(c.cls)).Int(c.exit_code).Int(c.node_rank).Str(c.node);
  w.Int(c.rank).Int(c.local_rank).Int(c.pid).Str(c.what);
}

bool ReadCause(FieldReader& r, Cause* c) {
  int cls = 0;
  if (!r.Int(&cls) || cls < 0 || cls > static_cast<int>(FailureClass::kExitCrash)) return false;
  c->cls = static_cast<FailureClass>(cls);
  return r.Int(&c->exit_code) && r.Int(&c->node_rank) && r.Str(&c->node) && r.Int(&c->rank) &&
         r.Int(&c->local_rank) && r.Int(&c->pid) && r.Str(&c->what);
}

Status Rejected(const std::string& why) { return Status(StatusCode::kAborted, why); }

// The common precondition of the transitions that act on a running round.
Status CheckRunning(const JobRecord& rec, int r) {
  if (rec.final()) return Rejected("the job is over");
  if (rec.round != r) {
    return Rejected("round " + std::to_string(r) + " is not the current round (" +
                    std::to_string(rec.round) + ")");
  }
  if (rec.end != RoundEnd::kNone) return Rejected("round " + std::to_string(r) + " already ended");
  return Status::Ok();
}

std::string EncodeWithdrawn(const std::vector<Withdrawal>& withdrawn) {
  FieldWriter w;
  for (const Withdrawal& x : withdrawn) w.Str(x.agent_id).Str(x.reason);
  return std::move(w.text());
}

bool DecodeWithdrawn(const std::string& text, std::vector<Withdrawal>* out) {
  FieldReader r(text);
  while (!r.AtEnd()) {
    Withdrawal x;
    if (!r.Str(&x.agent_id) || !r.Str(&x.reason)) return false;
    out->push_back(std::move(x));
  }
  return true;
}

std::string Bits(const std::vector<bool>& v) {
  std::string bits;
  for (bool b : v) bits += b ? '1' : '0';
  return bits;
}

// Every member's workers finished, or the member is gone.
bool AllFinished(const JobRecord& rec) {
  for (size_t i = 0; i < rec.done.size(); ++i) {
    if (!rec.done[i] && !rec.gone[i]) return false;
  }
  return true;
}

JobRecord Next(const JobRecord& rec) {
  JobRecord next = rec;
  ++next.version;
  return next;
}

JobRecord Fail(JobRecord next, const Cause& cause) {
  next.outcome = JobOutcome::kFailed;
  next.final_cause = cause;
  return next;
}

// The agents a next round can still form with: the members of `rec`'s round
// but the one it lost, and the agents that joined the next round
// (`joining`), less those that withdrew from it.
int Remaining(const JobRecord& rec, const std::vector<std::string>& joining) {
  std::set<std::string> agents(joining.begin(), joining.end());
  for (const NodeInfo& m : rec.members) {
    if (m.agent_id != rec.lost_agent) agents.insert(m.agent_id);
  }
  int n = 0;
  for (const std::string& a : agents) n += !rec.Withdrew(a);
  return n;
}

// A member left (lost, signalled) and fewer than --nnodes' minimum remain:
// with `restart` the job waits for another node, else it fails.
Cause TooFewNodes(const std::string& reason, int remain, int min_nodes, bool restart,
                  int max_restarts, const std::string& restart_cause) {
  Cause c;
  c.cls = FailureClass::kRendezvous;
  c.what = reason + "; " + std::to_string(remain) + " node(s) remain, fewer than the minimum of " +
           std::to_string(min_nodes) + " (--nnodes)";
  c.what += restart ? ": the job restarts (as for a failure) and waits up to join_timeout for "
                      "another node to join"
                    : ", and no restart is left (--max_restarts=" + std::to_string(max_restarts) +
                          ") to wait for another node: start the job again with every node, or "
                          "give --nnodes a lower minimum so that it goes on without one";
  // The failure that used the last restart is the one the user came for; the
  // loss only ended the job afterwards.
  if (!restart && max_restarts > 0 && !restart_cause.empty()) {
    c.what += " (the last restart was used after " + restart_cause + ")";
  }
  return c;
}

}  // namespace

const char* FailureClassName(FailureClass c) {
  switch (c) {
    case FailureClass::kWorker:
      return "worker";
    case FailureClass::kHang:
      return "hang";
    case FailureClass::kPeer:
      return "peer";
    case FailureClass::kRendezvous:
      return "rendezvous";
    case FailureClass::kSignal:
      return "signal";
    case FailureClass::kExitHang:
      return "exit-hang";
    case FailureClass::kExitCrash:
      return "exit-crash";
  }
  return "?";
}

bool FinishedProgram(FailureClass c) {
  return c == FailureClass::kExitHang || c == FailureClass::kExitCrash;
}

std::string Cause::Describe() const {
  if (node_rank < 0) return what;
  return "node " + std::to_string(node_rank) + " (" + node + "): " + what;
}

int JobRecord::exit_code() const {
  if (outcome == JobOutcome::kSucceeded) return 0;
  return outcome == JobOutcome::kFailed ? final_cause.exit_code : 1;
}

int JobRecord::MemberRank(const std::string& agent_id) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].agent_id == agent_id) return static_cast<int>(i);
  }
  return -1;
}

bool JobRecord::Withdrew(const std::string& agent_id) const {
  return std::any_of(withdrawn.begin(), withdrawn.end(),
                     [&](const Withdrawal& x) { return x.agent_id == agent_id; });
}

int JobRecord::world_size() const {
  int n = 0;
  for (const auto& m : members) n += m.nproc;
  return n;
}

std::string JobRecord::Encode() const {
  FieldWriter w;
  w.Str(kMagic).Int(version).Int(round).Str(EncodeMembers(members)).Int(restarts);
  w.Str(restart_cause);
  w.Int(static_cast<int>(end));
  WriteCause(w, cause);
  w.Str(end_reason).Str(lost_agent);
  w.Str(Bits(done)).Str(Bits(gone)).Str(gone_reason).Int(static_cast<int>(outcome));
  WriteCause(w, final_cause);
  w.Str(EncodeWithdrawn(withdrawn));
  return std::move(w.text());
}

StatusOr<JobRecord> JobRecord::Decode(const std::string& text) {
  JobRecord rec;
  if (text.empty()) return rec;
  auto bad = [&] {
    return InvalidArgument("rendezvous: malformed job record (" + std::to_string(text.size()) +
                           " bytes)");
  };
  FieldReader r(text);
  std::string magic, members, bits, gone_bits, withdrawn;
  int end = 0, outcome = 0;
  if (r.Str(&magic) && magic != kMagic && magic.rfind(kMagicFamily, 0) == 0) {
    return InvalidArgument("rendezvous: the job record is " + magic + ", this ddprun reads " +
                           kMagic + ": run the same ddprun version on every node");
  }
  if (magic != kMagic || !r.Int(&rec.version) || !r.Int(&rec.round) || !r.Str(&members) ||
      !r.Int(&rec.restarts) || !r.Str(&rec.restart_cause) || !r.Int(&end) ||
      !ReadCause(r, &rec.cause) || !r.Str(&rec.end_reason) || !r.Str(&rec.lost_agent) ||
      !r.Str(&bits) || !r.Str(&gone_bits) || !r.Str(&rec.gone_reason) || !r.Int(&outcome) ||
      !ReadCause(r, &rec.final_cause) || !r.Str(&withdrawn) ||
      !DecodeWithdrawn(withdrawn, &rec.withdrawn) || !r.AtEnd()) {
    return bad();
  }
  auto nodes = DecodeMembers(members);
  if (!nodes.ok() || end < 0 || end > 3 || outcome < 0 || outcome > 2 ||
      bits.size() != nodes->size() || gone_bits.size() != nodes->size()) {
    return bad();
  }
  rec.members = std::move(*nodes);
  rec.end = static_cast<RoundEnd>(end);
  rec.outcome = static_cast<JobOutcome>(outcome);
  for (char c : bits) rec.done.push_back(c == '1');
  for (char c : gone_bits) rec.gone.push_back(c == '1');
  return rec;
}

StatusOr<JobRecord> CloseRound(const JobRecord& rec, int r, std::vector<NodeInfo> members) {
  if (rec.final()) return Rejected("the job is over");
  if (r != rec.round + 1) {
    return Rejected("round " + std::to_string(r) + " does not follow round " +
                    std::to_string(rec.round));
  }
  if (rec.round >= 0 && rec.end == RoundEnd::kNone) {
    return Rejected("round " + std::to_string(rec.round) + " still runs");
  }
  for (const NodeInfo& m : members) {
    if (rec.Withdrew(m.agent_id)) {
      return Rejected("agent " + m.agent_id + " left round " + std::to_string(r));
    }
  }
  JobRecord next = Next(rec);
  next.withdrawn.clear();
  next.round = r;
  next.done.assign(members.size(), false);
  next.gone.assign(members.size(), false);
  next.gone_reason.clear();
  next.members = std::move(members);
  next.end = RoundEnd::kNone;
  next.cause = Cause();
  next.end_reason.clear();
  next.lost_agent.clear();
  return next;
}

StatusOr<JobRecord> EndRoundByFailure(const JobRecord& rec, int r, const Cause& cause,
                                      int max_restarts) {
  if (Status s = CheckRunning(rec, r); !s.ok()) return s;
  JobRecord next = Next(rec);
  next.end = RoundEnd::kFailure;
  next.cause = cause;
  // A restart would run again a program that had finished.
  if (++next.restarts > max_restarts || FinishedProgram(cause.cls)) {
    return Fail(std::move(next), cause);
  }
  next.restart_cause = cause.Describe();
  return next;
}

StatusOr<JobRecord> EndRoundByMembership(const JobRecord& rec, int r, const std::string& reason,
                                         const std::string& lost_agent, int min_nodes,
                                         const std::vector<std::string>& joining, int max_restarts,
                                         const std::vector<std::string>& also_lost) {
  if (Status s = CheckRunning(rec, r); !s.ok()) return s;
  if (!lost_agent.empty()) {
    int lost = rec.MemberRank(lost_agent);
    if (lost < 0) return Rejected("agent " + lost_agent + " is not a member");
    if (rec.done[lost]) return Rejected("agent " + lost_agent + "'s workers finished");
  }
  JobRecord next = Next(rec);
  next.end = RoundEnd::kMembership;
  next.end_reason = reason;
  next.lost_agent = lost_agent;
  JobRecord counted = next;  // the others lost with it leave too
  for (const std::string& a : also_lost) counted.withdrawn.push_back({a, reason});
  const int remain = Remaining(counted, joining);
  if (remain >= min_nodes) return next;
  // Too few to go on: a restart, as torchrun's agents make when a node's
  // loss fails their workers, and the next round waits join_timeout for
  // another node; the job fails when none is left.
  const bool restart = next.restarts < max_restarts;
  const Cause cause =
      TooFewNodes(reason, remain, min_nodes, restart, max_restarts, rec.restart_cause);
  if (!restart) return Fail(std::move(next), cause);
  next.end = RoundEnd::kFailure;
  next.cause = cause;
  next.restart_cause = reason;
  ++next.restarts;
  return next;
}

StatusOr<JobRecord> LoseBeforeRejoin(const JobRecord& rec, int r, const std::string& reason,
                                     const std::vector<std::string>& lost, int min_nodes,
                                     const std::vector<std::string>& joining, int max_restarts) {
  if (rec.final()) return Rejected("the job is over");
  if (r != rec.round + 1 || rec.round < 0) {
    return Rejected("round " + std::to_string(r) + " is not gathering after a round");
  }
  if (rec.restarts < max_restarts) return Rejected("a restart is left: the round gathers on");
  // After a restart (a failure, or a loss that left too few) the round waits
  // join_timeout for nodes anyway: a loss from the same event (two nodes
  // killed together) is covered by it (attack 88).
  if (rec.end != RoundEnd::kMembership && rec.end != RoundEnd::kNewNodes) {
    return Rejected("the round before ended with a restart: the round waits for nodes");
  }
  std::vector<std::string> others;
  for (const std::string& a : joining) {
    if (std::find(lost.begin(), lost.end(), a) == lost.end()) others.push_back(a);
  }
  JobRecord next = Next(rec);
  const JobRecord without = [&] {
    JobRecord w = rec;
    for (const std::string& a : lost) w.withdrawn.push_back({a, reason});
    return w;
  }();
  const int remain = Remaining(without, others);
  if (remain >= min_nodes) return Rejected("enough nodes remain");
  return Fail(std::move(next),
              TooFewNodes(reason, remain, min_nodes, false, max_restarts, rec.restart_cause));
}

StatusOr<JobRecord> Withdraw(const JobRecord& rec, int r, const std::string& agent_id,
                             const std::string& reason, int min_nodes,
                             const std::vector<std::string>& joining, int max_restarts) {
  if (rec.final()) return Rejected("the job is over");
  if (r != rec.round + 1) return Rejected("round " + std::to_string(r) + " is not gathering");
  if (rec.Withdrew(agent_id)) return Rejected("agent " + agent_id + " withdrew already");
  JobRecord next = Next(rec);
  next.withdrawn.push_back({agent_id, reason});
  if (rec.MemberRank(agent_id) < 0) return next;
  // A member of the round before leaves as it would have from that round;
  // with a restart left the round gathers on, within join_timeout (no round
  // runs: none is used).
  const int remain = Remaining(next, joining);
  if (remain >= min_nodes || next.restarts < max_restarts) return next;
  return Fail(std::move(next),
              TooFewNodes(reason, remain, min_nodes, false, max_restarts, rec.restart_cause));
}

StatusOr<JobRecord> Rejoin(const JobRecord& rec, int r, const std::string& agent_id) {
  if (rec.final()) return Rejected("the job is over");
  if (r != rec.round + 1) return Rejected("round " + std::to_string(r) + " is not gathering");
  if (!rec.Withdrew(agent_id)) return Rejected("agent " + agent_id + " did not withdraw");
  JobRecord next = Next(rec);
  next.withdrawn.erase(std::remove_if(next.withdrawn.begin(), next.withdrawn.end(),
                                      [&](const Withdrawal& x) { return x.agent_id == agent_id; }),
                       next.withdrawn.end());
  return next;
}

StatusOr<JobRecord> EndRoundForNewNodes(const JobRecord& rec, int r, const std::string& reason) {
  if (Status s = CheckRunning(rec, r); !s.ok()) return s;
  JobRecord next = Next(rec);
  next.end = RoundEnd::kNewNodes;
  next.end_reason = reason;
  return next;
}

StatusOr<JobRecord> MarkDone(const JobRecord& rec, int r, int node_rank) {
  // A round that ended because a member was lost (by a membership change, or as a failure
  // when too few remained), said a moment before this node's workers said they succeeded.
  const bool lost_end = rec.round == r && !rec.final() && !rec.lost_agent.empty() &&
                        (rec.end == RoundEnd::kMembership || rec.end == RoundEnd::kFailure);
  // A round ended by a membership change is over for training, but workers
  // that had already succeeded did; a failure is final for the round.
  if ((rec.end == RoundEnd::kFailure && !lost_end) || rec.round != r || rec.final()) {
    if (Status s = CheckRunning(rec, r); !s.ok()) return s;
  }
  if (node_rank < 0 || node_rank >= static_cast<int>(rec.members.size())) {
    return Rejected("node rank " + std::to_string(node_rank) + " is not a member");
  }
  JobRecord next = Next(rec);
  next.done[node_rank] = true;
  next.gone[node_rank] = false;  // it came back
  // Every member but the lost one had succeeded: the training ran to its end
  // without it, as when it is lost after the others finished (ExcuseLost);
  // running it again trained twice (attack 110, simulation).
  const int lost = lost_end ? rec.MemberRank(rec.lost_agent) : -1;
  if (!AllFinished(next) && lost >= 0 && !next.done[lost]) {
    JobRecord without = next;
    without.gone[lost] = true;
    if (AllFinished(without)) {
      without.gone_reason += (without.gone_reason.empty() ? "" : "; ") + rec.end_reason;
      next = std::move(without);
    }
  }
  // Otherwise, after a loss that left too few, the restart stands; the next round cannot
  // close before more nodes come, so the others still say theirs.
  if (AllFinished(next)) next.outcome = JobOutcome::kSucceeded;
  return next;
}

StatusOr<JobRecord> ExcuseLost(const JobRecord& rec, int r, const std::string& reason,
                               const std::string& lost_agent) {
  if (Status s = CheckRunning(rec, r); !s.ok()) return s;
  const int lost = rec.MemberRank(lost_agent);
  if (lost < 0 || rec.done[lost] || rec.gone[lost]) {
    return Rejected("agent " + lost_agent + " is not a member still awaited");
  }
  if (std::none_of(rec.done.begin(), rec.done.end(), [](bool b) { return b; })) {
    return Rejected("no member's workers finished");
  }
  JobRecord next = Next(rec);
  next.gone[lost] = true;
  next.gone_reason += (next.gone_reason.empty() ? "" : "; ") + reason;
  if (AllFinished(next)) next.outcome = JobOutcome::kSucceeded;
  return next;
}

StatusOr<JobRecord> CloseJob(const JobRecord& rec, const Cause& cause) {
  if (rec.final()) return Rejected("the job is over");
  return Fail(Next(rec), cause);
}

StatusOr<std::vector<std::string>> JoinedAgents(Kv& kv, const RendezvousKeys& keys, int r) {
  std::vector<std::string> agents;
  auto joined = kv.Add(keys.Join(r), 0);
  if (!joined.ok()) return joined.status();
  for (int64_t i = 0; i < *joined; ++i) {
    auto text = kv.TryGet(keys.Node(r, static_cast<int>(i)));
    if (!text.ok()) return text.status();
    if (!*text) continue;  // on its way
    if (auto node = NodeInfo::Decode(**text); node.ok()) agents.push_back(node->agent_id);
  }
  return agents;
}

StatusOr<JobRecord> ReadRecord(Kv& kv, const RendezvousKeys& keys) {
  auto text = kv.TryGet(keys.Job());
  if (!text.ok()) return text.status();
  return JobRecord::Decode(text->value_or(""));
}

StatusOr<Applied> ApplyTransition(Kv& kv, const RendezvousKeys& keys,
                                  const Transition& transition) {
  auto text = kv.TryGet(keys.Job());
  if (!text.ok()) return text.status();
  std::string current = text->value_or("");
  // Each lost race means another writer's transition landed; the record
  // only moves forward, so this ends (bounded all the same).
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto rec = JobRecord::Decode(current);
    if (!rec.ok()) return rec.status();
    auto next = transition(*rec);
    if (!next.ok()) return Applied{std::move(*rec), false};  // rejected: act on what is stored
    const std::string desired = next->Encode();
    auto stored = kv.CompareSet(keys.Job(), current, desired);
    if (!stored.ok()) return stored.status();
    if (*stored == desired) {
      // Wakes whoever waits for the record to change.
      if (Status s = kv.Set(keys.Version(next->version), ""); !s.ok()) return s;
      return Applied{std::move(*next), true};
    }
    current = std::move(*stored);
  }
  return Internal("rendezvous: the job record kept changing under 1000 compare-and-sets");
}

}  // namespace ddprun::rendezvous
