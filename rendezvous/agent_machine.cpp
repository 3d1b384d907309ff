#include "rendezvous/agent_machine.hpp"

#include <algorithm>
#include <sstream>

#include "base/exit_codes.hpp"

namespace ddprun::rendezvous {

std::string DurationText(std::chrono::milliseconds d) {
  std::ostringstream o;
  o << d.count() / 1000.0 << " s";
  return o.str();
}

namespace {

// Why round `r` no longer runs, as the record says.
std::string WhyEnded(const JobRecord& rec, int r) {
  const std::string round = "round " + std::to_string(r);
  if (rec.round != r) return round + " was replaced by round " + std::to_string(rec.round);
  if (rec.end == RoundEnd::kFailure) {
    // "failure on" reads for a worker's ("node 1 (h): rank 3 ..."); a loss or
    // a signal says what happened itself ("lost h (...)", "... was stopped").
    const bool worker = rec.cause.cls == FailureClass::kWorker ||
                        rec.cause.cls == FailureClass::kPeer ||
                        rec.cause.cls == FailureClass::kHang || FinishedProgram(rec.cause.cls);
    return round + " ended: " + (worker ? "failure on " : "") + rec.cause.Describe();
  }
  if (rec.end == RoundEnd::kMembership || rec.end == RoundEnd::kNewNodes) {
    return round + " ended: " + rec.end_reason;
  }
  if (rec.outcome == JobOutcome::kFailed) return "the job failed: " + rec.final_cause.Describe();
  return "the job is over";
}

// "N of at least MIN nodes joined; seen: ...; missing node ranks: ..." for a
// round still forming.
// `rec` is the record as read: its withdrawals are of round `round`.
std::string Joined(Kv& kv, const RendezvousKeys& keys, const RendezvousSettings& s,
                   const JobRecord& rec, int round) {
  auto joined = kv.Add(keys.Join(round), 0);
  const int arrivals = joined.ok() ? static_cast<int>(*joined) : 0;
  const bool gathering = round == rec.round + 1;
  std::vector<bool> rank_seen(s.max_nodes, false);
  int distinct_ranks = 0;
  int n = 0;
  std::string seen, contested, silent;
  // The arrivals the coordinator does not count: silent past the limit.
  auto silent_ids = kv.TryGet(keys.Silent(round));
  const std::string silent_list =
      silent_ids.ok() && *silent_ids ? "\n" + **silent_ids : std::string();
  for (int i = 0; i < arrivals; ++i) {
    auto text = kv.TryGet(keys.Node(round, i));
    if (!text.ok() || !*text) continue;
    auto node = NodeInfo::Decode(**text);
    if (!node.ok() || (gathering && rec.Withdrew(node->agent_id))) continue;
    const std::string who = node->name + " (" + node->addr + ")";
    if (silent_list.find("\n" + node->agent_id + "\n") != std::string::npos) {
      silent += (silent.empty() ? "" : ", ") + who;
      continue;
    }
    if (s.exclusive_ranks && node->requested_rank >= 0) {
      // Not counted while another agent holds its rank (it takes the rank
      // over once that one is silent past the keep-alive limit).
      auto holder = kv.TryGet(keys.Claim(node->requested_rank));
      if (holder.ok() && (!*holder || **holder != node->Encode())) {
        contested += "; " + who + " waits for node rank " + std::to_string(node->requested_rank) +
                     ", which an earlier agent holds";
        continue;
      }
    }
    ++n;
    seen += (seen.empty() ? "" : ", ") + who;
    if (node->requested_rank >= 0 && node->requested_rank < s.max_nodes &&
        !rank_seen[node->requested_rank]) {
      rank_seen[node->requested_rank] = true;
      ++distinct_ranks;
    }
  }
  std::ostringstream why;
  if (n >= s.min_nodes && n < s.max_nodes) {
    // Enough to train: the last call waits for more (--nnodes=MIN:MAX).
    why << n << " of " << s.min_nodes << " to " << s.max_nodes
        << " nodes joined; the round forms when " << s.max_nodes << " have or last_call_timeout ("
        << DurationText(s.last_call_timeout) << ") runs out";
  } else {
    why << n << " of at least " << s.min_nodes << " nodes joined";
  }
  if (!seen.empty()) why << "; seen: " << seen;
  // Named only when every node counted asked for a rank of its own: one
  // without, or a second asking for a taken one, takes a free rank instead.
  const bool exact = n > 0 && distinct_ranks == n;
  std::string missing;
  for (int r = 0; exact && r < s.max_nodes; ++r) {
    if (!rank_seen[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
  }
  if (!missing.empty()) why << "; missing node ranks: " << missing;
  if (!silent.empty()) {
    why << "; not counted, silent past the keep-alive limit (killed, or stopped): " << silent;
  }
  why << contested;
  const size_t left = gathering ? rec.withdrawn.size() : 0;
  for (size_t i = 0; i < left; ++i) why << "; left: " << rec.withdrawn[i].reason;
  return why.str();
}

}  // namespace

std::string JoinTimeoutReport(Kv& kv, const RendezvousKeys& keys, const RendezvousSettings& s,
                              const JobRecord& rec, int round) {
  // Static (its ranks exclusive) names its own setting, "timeout", and has no
  // minimum to lower (attack 114: a static user was told to raise join_timeout).
  if (s.exclusive_ranks) {
    return "rendezvous round " + std::to_string(round) + " timed out after " +
           DurationText(s.join_timeout) +
           " (--rdzv_conf timeout): " + Joined(kv, keys, s, rec, round) +
           "; start the missing nodes (the same store address, each with its own --node_rank), "
           "or raise timeout in --rdzv_conf";
  }
  return "rendezvous round " + std::to_string(round) + " timed out after " +
         DurationText(s.join_timeout) + " (join_timeout): " + Joined(kv, keys, s, rec, round) +
         "; start the missing nodes (the same --rdzv_endpoint and --rdzv_id), give --nnodes a "
         "lower minimum, or raise join_timeout in --rdzv_conf";
}

AgentMachine::AgentMachine(AgentSettings settings)
    : s_(std::move(settings)), keys_(s_.rdzv.run_id) {}

Action AgentMachine::Step(Kv& kv, Time now) {
  gone_in_step_.reset();
  if (phase_ == Phase::kDone) return done_;
  if (phase_ == Phase::kStoreGone) return AfterStoreGone(now);
  if (last_step_) {
    // Time between two steps that this agent spent neither waiting for the
    // store's replies (its wait for the next record among them) nor working:
    // its process did not run (SIGSTOP, a starved host). That does not count
    // against its own waits; what happened meanwhile is read from the record
    // below. Time it waited for a stopped store host does: it ran then (the
    // whole gap counted stretched join_timeout by the host's pause, attack 107).
    const auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(now - *last_step_);
    const auto self = gap - std::min(gap, waited_);
    if (self > s_.rdzv.keep_alive_interval) {
      deadline_ += self;
      away_ = std::max(away_, self);
    }
    // Nor does time past the wake it asked for count as the holder's silence:
    // this agent could not watch it (and when the store host was stopped, no
    // one could beat).
    const Time::duration late = now - std::max(*last_step_, next_wake_);
    if (contest_ && late > Time::duration::zero()) {
      contest_->since = std::min(now, contest_->since + late);
    }
  }
  last_step_ = now;
  waited_ = {};
  if (Status s = Beat(kv, now); !s.ok()) return StoreGone(s);
  // A signal ends the agent, but what its workers did is recorded first (a
  // success is a success; the signal stops only what runs).
  if (signal_ != 0 && phase_ != Phase::kRunning && phase_ != Phase::kStopping &&
      phase_ != Phase::kExited) {
    return Leave(kv);
  }
  if (phase_ == Phase::kStopping) return Wait(now);  // for the workers to exit
  // Every decision starts from what the record says now.
  auto rec = Read(kv);
  if (!rec.ok()) return StoreGone(rec.status());
  switch (phase_) {
    case Phase::kJoin:
      return Join(kv, *rec, now);
    case Phase::kWaitRound:
      return WaitRound(kv, *rec, now);
    case Phase::kClearing:
      return Clearing(kv, *rec, now);
    case Phase::kRunning:
      return early_ ? RecordEarlyFailure(kv, *rec, now) : Running(*rec, now);
    case Phase::kExited:
      return Exited(kv, *rec, now);
    case Phase::kFinishing:
      return Finishing(kv, *rec, now);
    case Phase::kStopping:
    case Phase::kStoreGone:
    case Phase::kDone:
      break;
  }
  return done_;
}

std::string AgentMachine::wake_key() const {
  if (phase_ == Phase::kClearing && node_rank_ > 0) return keys_.Cleared(round_);
  return keys_.Version(version_ + 1);
}

void AgentMachine::WorkersExited(const WorkersOutcome& outcome, Time now) {
  if (phase_ == Phase::kStoreGone) {
    outcome_ = outcome;
    outcome_known_ = true;
    next_wake_ = now;
    return;
  }
  if (phase_ != Phase::kRunning && phase_ != Phase::kStopping) return;
  outcome_ = outcome;
  settle_until_ = now + s_.peer_settle;
  phase_ = Phase::kExited;
  next_wake_ = now;
}

void AgentMachine::FailedEarly(const WorkersOutcome& outcome, Time now) {
  if (phase_ != Phase::kRunning || outcome.kind != WorkersOutcome::Kind::kFailed ||
      outcome.cause.cls == FailureClass::kPeer || outcome.settle) {
    return;
  }
  early_ = outcome;
  next_wake_ = now;
}

Status AgentMachine::Beat(Kv& kv, Time now) {
  if (now < next_beat_) return Status::Ok();
  next_beat_ = now + s_.rdzv.keep_alive_interval;
  return kv.Add(keys_.KeepAlive(s_.self.agent_id), 1).status();
}

Action AgentMachine::Wait(Time now, std::optional<Time> until) {
  next_wake_ = std::min(now + s_.poll, next_beat_);
  if (until) next_wake_ = std::min(next_wake_, std::max(now, *until));
  return Action{};
}

StatusOr<JobRecord> AgentMachine::Read(Kv& kv) {
  auto rec = ReadRecord(kv, keys_);
  if (rec.ok()) version_ = rec->version;
  return rec;
}

StatusOr<Applied> AgentMachine::Apply(Kv& kv, const Transition& t) {
  auto applied = ApplyTransition(kv, keys_, t);
  if (applied.ok()) version_ = applied->record.version;
  return applied;
}

RoundResult AgentMachine::Result(const JobRecord& rec, int node_rank) const {
  RoundResult r;
  r.round = rec.round;
  r.node_rank = node_rank;
  r.nodes = rec.members;
  r.restart_count = rec.restarts;
  for (int i = 0; i < static_cast<int>(rec.members.size()); ++i) {
    if (i == node_rank) r.base_rank = r.world_size;
    r.world_size += rec.members[i].nproc;
  }
  return r;
}

Action AgentMachine::Exit(int code, std::string message) {
  done_ = Action{};
  done_.kind = ActionKind::kExit;
  done_.exit_code = code;
  done_.message = std::move(message);
  phase_ = Phase::kDone;
  return done_;
}

Action AgentMachine::ExitByRecord(const JobRecord& rec) {
  const bool failed = rec.outcome == JobOutcome::kFailed;
  std::string message;
  if (failed) {
    message = "the job failed: " + rec.final_cause.Describe();
  } else if (!ran_workers_ && rec.MemberRank(s_.self.agent_id) < 0) {
    message = "the job succeeded while this agent waited to join round " + std::to_string(round_) +
              ": no worker ran here (meant as a job of its own? give it an --rdzv_id or "
              "--rdzv_endpoint of its own: run id " +
              s_.rdzv.run_id + " at this endpoint is that job's)";
  } else if (std::find(rec.gone.begin(), rec.gone.end(), true) != rec.gone.end()) {
    message = "the job is complete without a node: " + rec.gone_reason;
  }
  Exit(rec.exit_code(), std::move(message));
  done_.failed = failed;
  done_.root_cause = rec.final_cause;
  return done_;
}

Action AgentMachine::Follow(Kv& kv, const JobRecord& rec, Time now) {
  if (rec.final()) return JobOver(kv, rec);
  if (node_rank_ >= 0 && rec.round == round_) previous_end_ = WhyEnded(rec, round_);
  min_round_ = std::max(min_round_, round_ + 1);
  if (signal_ != 0) {
    // Signalled while its workers stopped (their failure recorded): it leaves
    // the round being gathered as an agent that had joined it would, instead
    // of joining it, which would close with it and start the others' workers
    // only to stop them (attack 82).
    round_ = std::max(min_round_, rec.round + 1);
    node_rank_ = -1;
    return Leave(kv);
  }
  phase_ = Phase::kJoin;
  return Join(kv, rec, now);
}

Action AgentMachine::Join(Kv& kv, const JobRecord& rec, Time now) {
  if (rec.final()) return JobOver(kv, rec);
  if (auto refused = CheckSettings(kv, rec)) return *refused;
  if (auto refused = ClaimRank(kv, rec, now)) return *refused;
  const int r = std::max(min_round_, rec.round + 1);
  auto arrival = kv.Add(keys_.Join(r), 1);
  if (!arrival.ok()) return StoreGone(arrival.status());
  if (Status s = kv.Set(keys_.Node(r, static_cast<int>(*arrival - 1)), s_.self.Encode()); !s.ok()) {
    return StoreGone(s);
  }
  round_ = r;
  node_rank_ = -1;
  if (!first_join_) {
    first_join_ = now;
    deadline_ = now + s_.rdzv.join_timeout;
    next_progress_ = now + kFirstProgress;
  }
  phase_ = Phase::kWaitRound;
  return Wait(now, deadline_);
}

Action AgentMachine::WaitRound(Kv& kv, const JobRecord& rec, Time now) {
  if (rec.final()) return JobOver(kv, rec);
  if (auto claim = ClaimRank(kv, rec, now)) return *claim;
  if (rec.round >= round_) {
    const int rank = rec.round == round_ ? rec.MemberRank(s_.self.agent_id) : -1;
    if (rank < 0 || !rec.Running(round_)) return Follow(kv, rec, now);  // closed without us
    node_rank_ = rank;
    first_join_.reset();
    cleared_ = false;
    phase_ = Phase::kClearing;
    return Clearing(kv, rec, now);
  }
  if (now < deadline_) {
    Action wait = Wait(now, std::min(deadline_, next_progress_));
    if (now >= next_progress_) {
      next_progress_ = now + kProgressEvery;
      const auto left = std::chrono::round<std::chrono::seconds>(deadline_ - now);
      const int finished = static_cast<int>(std::count(rec.done.begin(), rec.done.end(), true));
      const std::string running = "the job runs round " + std::to_string(rec.round) + " with " +
                                  std::to_string(rec.members.size()) + " of at most " +
                                  std::to_string(s_.rdzv.max_nodes) + " nodes";
      wait.message = (rec.round < 0 || rec.end != RoundEnd::kNone
                          ? "waiting for round " + std::to_string(round_) + ": " +
                                Joined(kv, keys_, s_.rdzv, rec, round_)
                      : finished > 0 ? "waiting to join: " + running + ", and the workers of " +
                                           std::to_string(finished) +
                                           " of them finished: no new round forms now (it would "
                                           "train again); the job may end "
                                           "without this node"
                      : static_cast<int>(rec.members.size()) < s_.rdzv.max_nodes
                          ? "waiting to join: " + running +
                                "; it re-forms with this node once every member "
                                "answers"
                          : "waiting for a place in the job: " + running) +
                     "; " + s_.rdzv.JoinTimeoutName() + " ends the wait in " + DurationText(left);
    }
    return wait;
  }
  if (rec.round >= 0 && rec.end == RoundEnd::kNone) {
    // The job runs at its maximum size: no place for this node, but nothing
    // wrong with the job.
    return Exit(1, "rendezvous: waited " + DurationText(s_.rdzv.join_timeout) +
                       " (join_timeout) for a place in the job, which runs round " +
                       std::to_string(rec.round) + " with " + std::to_string(rec.members.size()) +
                       " of at most " + std::to_string(s_.rdzv.max_nodes) +
                       " nodes: give --nnodes a higher maximum to admit this node, or start it "
                       "when one leaves");
  }
  Cause c;
  c.cls = FailureClass::kRendezvous;
  c.what = JoinTimeoutReport(kv, keys_, s_.rdzv, rec, round_);
  auto applied = Apply(kv, [&](const JobRecord& r) { return CloseJob(r, c); });
  if (!applied.ok()) return StoreGone(applied.status());
  if (applied->record.final()) return ExitByRecord(applied->record);
  return Follow(kv, applied->record, now);
}

Action AgentMachine::Clearing(Kv& kv, const JobRecord& rec, Time now) {
  if (!rec.Running(round_)) return Follow(kv, rec, now);
  Action start;
  start.kind = ActionKind::kStartWorkers;
  start.round = Result(rec, node_rank_);
  start.round.previous_end = previous_end_;
  if (node_rank_ == 0) {
    // Node rank 0 empties the workers' key space before anyone starts workers, so
    // no key of the last attempt survives (PyTorch issue #135712).
    if (!cleared_) {
      start.kind = ActionKind::kClearWorkerStore;
      next_wake_ = now;
      return start;
    }
    if (Status s = kv.Set(keys_.Cleared(round_), "1"); !s.ok()) return StoreGone(s);
  } else {
    auto cleared = kv.TryGet(keys_.Cleared(round_));
    if (!cleared.ok()) return StoreGone(cleared.status());
    if (!*cleared) return Wait(now);
  }
  phase_ = Phase::kRunning;
  ran_workers_ = true;
  // A pause before this round is not one of this round's (attack 100: a pause in round 0 was
  // told when the store went in round 1).
  away_ = {};
  return start;
}

Action AgentMachine::Running(const JobRecord& rec, Time now) {
  if (rec.Running(round_)) return Wait(now);
  if (rec.final()) final_seen_ = rec;
  phase_ = Phase::kStopping;
  Action stop;
  stop.kind = ActionKind::kStopWorkers;
  stop.message = WhyEnded(rec, round_);
  return stop;
}

// The round ends by this node's failure while its workers are being stopped;
// the machine then waits for their exit (WorkersExited), which ends the
// round again only if this did not land.
Action AgentMachine::RecordEarlyFailure(Kv& kv, const JobRecord& rec, Time now) {
  Cause cause = early_->cause;
  early_.reset();
  phase_ = Phase::kStopping;
  if (!rec.Running(round_)) {  // ended already: the exit follows it
    if (rec.final()) final_seen_ = rec;
    return Wait(now);
  }
  cause.node_rank = node_rank_;
  cause.node = s_.self.name;
  auto applied = Apply(kv, [&](const JobRecord& r) {
    return EndRoundByFailure(r, round_, cause, s_.rdzv.max_restarts);
  });
  if (!applied.ok()) return StoreGone(applied.status());
  if (applied->record.final()) final_seen_ = applied->record;
  return Wait(now);
}

Action AgentMachine::Exited(Kv& kv, const JobRecord& now_rec, Time now) {
  using Kind = WorkersOutcome::Kind;
  if (outcome_.kind == Kind::kInterrupted) {
    signal_ = outcome_.signal;
    signal_name_ = outcome_.signal_name;
    return Leave(kv);
  }
  Transition t;
  if (outcome_.kind == Kind::kSucceeded) {
    t = [&](const JobRecord& r) { return MarkDone(r, round_, node_rank_); };
  } else if (outcome_.kind == Kind::kFailed) {
    Cause cause = outcome_.cause;
    cause.node_rank = node_rank_;
    cause.node = s_.self.name;
    if ((cause.cls == FailureClass::kPeer || outcome_.settle) && now < settle_until_) {
      // Give the failure that caused this one the chance to be recorded first.
      if (!now_rec.Running(round_)) return Follow(kv, now_rec, now);
      return Wait(now, settle_until_);
    }
    t = [&, cause](const JobRecord& r) {
      return EndRoundByFailure(r, round_, cause, s_.rdzv.max_restarts);
    };
  } else {
    // Stopped because the round ended, which the record says; should it
    // still run, the round is ended here (this node stays), so that no
    // agent waits for workers that are gone.
    const std::string why =
        "node " + std::to_string(node_rank_) + " (" + s_.self.name + ")'s workers were stopped";
    t = [&, why](const JobRecord& r) { return EndRoundByMembership(r, round_, why, "", 0); };
  }
  auto applied = Apply(kv, t);
  if (!applied.ok()) return StoreGone(applied.status());
  const JobRecord& rec = applied->record;
  if (applied->landed && outcome_.kind == Kind::kSucceeded && !rec.final()) {
    phase_ = Phase::kFinishing;
    return Wait(now);
  }
  return Follow(kv, rec, now);
}

Action AgentMachine::Finishing(Kv& kv, const JobRecord& rec, Time now) {
  if (!rec.Running(round_)) return Follow(kv, rec, now);  // over, or ended
  return Wait(now);
}

Action AgentMachine::Leave(Kv& kv) {
  const std::string by = "stopped by " + signal_name_;
  // Read before this agent's leaving changes the record.
  const auto before = Read(kv);
  const std::string ended = before.ok() ? RoundEndedElsewhere(*before) : "";
  // Best effort: the store may be gone too.
  if (s_.hosts_store) {
    // The job ends with its store, whatever round runs or forms. The others
    // were not signalled: they exit 1, as for a store gone (torchrun's too);
    // 128+N would tell a scheduler they were stopped themselves.
    Cause c;
    c.cls = FailureClass::kSignal;
    c.exit_code = 1;
    c.what = "the agent hosting the store (" + s_.self.name + ") was " + by;
    (void)Apply(kv, [&](const JobRecord& r) { return CloseJob(r, c); });
  } else if (round_ >= 0) {
    // Between rounds it has no node rank: named by its host and agent.
    const std::string who = node_rank_ >= 0
                                ? "node " + std::to_string(node_rank_) + " (" + s_.self.name + ")"
                                : "the agent on " + s_.self.name + " (" + s_.self.agent_id +
                                      ", joining round " + std::to_string(round_) + ")";
    const std::string reason = who + " was " + by;
    if (node_rank_ < 0) {
      // Joined a round that may not have closed: it must close without
      // this agent. Should it have closed with it, the round ends below.
      const auto joining = JoinedAgents(kv, keys_, round_);
      (void)Apply(kv, [&](const JobRecord& r) {
        return Withdraw(r, round_, s_.self.agent_id, reason, s_.rdzv.min_nodes,
                        joining.ok() ? *joining : std::vector<std::string>{}, s_.rdzv.max_restarts);
      });
    }
    // Its node rank is free again for an agent started in its place (at
    // once, not after the keep-alive limit).
    if (rank_claimed_) {
      (void)kv.CompareSet(keys_.Claim(s_.self.requested_rank), s_.self.Encode(), "");
    }
    const auto joining = JoinedAgents(kv, keys_, round_ + 1);
    (void)Apply(kv, [&](const JobRecord& r) {
      return EndRoundByMembership(r, round_, reason, s_.self.agent_id, s_.rdzv.min_nodes,
                                  joining.ok() ? *joining : std::vector<std::string>{},
                                  s_.rdzv.max_restarts);
    });
  }
  Action exit = Exit(exit_code::ForSignal(signal_), "received " + signal_name_);
  exit.round_ended = ended;
  return exit;
}

std::string AgentMachine::RoundEndedElsewhere(const JobRecord& rec) const {
  if (rec.end == RoundEnd::kNone || rec.final()) return "";
  if (rec.end != RoundEnd::kFailure) return rec.end_reason;
  const auto me = std::find_if(rec.members.begin(), rec.members.end(),
                               [&](const NodeInfo& n) { return n.agent_id == s_.self.agent_id; });
  const bool ours = me != rec.members.end() && rec.cause.node_rank == me - rec.members.begin();
  return ours ? "" : rec.cause.Describe();
}

}  // namespace ddprun::rendezvous
