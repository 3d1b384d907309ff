// The invariants of docs/elastic-invariants.md, checked after every step and
// at the end of a simulated job (sim.hpp).
#include "tests/sim/sim.hpp"

namespace ddprun::rendezvous::sim {

void Sim::Check() {
  if (store_down_) return;  // the record is gone with the store
  JobRecord rec = Record();
  if (rec.version == seen_version_) return;
  seen_version_ = rec.version;
  if (final_ && (!rec.final() || rec.exit_code() != final_->exit_code() ||
                 rec.final_cause.Describe() != final_->final_cause.Describe())) {
    Fail("(b) the final record changed: exit " + std::to_string(final_->exit_code()) + " -> " +
         std::to_string(rec.exit_code()));
  }
  if (rec.final() && !final_) {
    // (h): only killed agents are started again here: a rank is never
    // claimed twice by two live agents.
    if (rec.final_cause.what.find("claimed twice") != std::string::npos) {
      Fail("(h) " + rec.final_cause.what);
    }
    final_ = rec;
    Log("record final: exit " + std::to_string(rec.exit_code()) + " " + rec.final_cause.Describe());
  }
  if (rec.round >= 0 && rec.end == RoundEnd::kFailure && failed_rounds_.insert(rec.round).second &&
      rec.cause.cls == FailureClass::kPeer) {
    // (e): a node lost is a membership change, found within the keep-alive
    // limit, before the peers' deaths it caused are recorded as a failure.
    const RoundPlan& plan = rounds_[rec.round];
    if (plan.crash && !plan.primary && !Hindered(0, plan.crash->second, now_)) {
      Fail("(e) the loss of " + agents_[plan.crash->first].id +
           " was recorded as a failure: " + rec.cause.Describe());
    }
  }
  // (e): a worker hung or crashed at exit ends the job: a restart would run its finished
  // program again.
  if (rec.round >= 0 && rec.end == RoundEnd::kFailure && FinishedProgram(rec.cause.cls) &&
      !rec.final()) {
    Fail("(e) a hang or crash at exit was restarted: " + rec.cause.Describe());
  }
  // (e): restarts are used by failures only.
  if (rec.restarts != static_cast<int>(failed_rounds_.size())) {
    Fail("(e) restarts " + std::to_string(rec.restarts) + " but " +
         std::to_string(failed_rounds_.size()) + " round(s) ended by a failure");
  }
  // (c): nobody is declared lost unless it was silent that long by its own
  // doing (paused, killed, gone), never because the store host was paused.
  std::vector<std::string> lost_now;
  if (rec.end != RoundEnd::kNone && !rec.lost_agent.empty() &&
      lost_checked_.insert({rec.round, rec.lost_agent}).second) {
    lost_now.push_back(rec.lost_agent);
  }
  for (size_t i = 0; i < rec.gone.size(); ++i) {  // not awaited after others finished
    if (rec.gone[i] && lost_checked_.insert({rec.round, rec.members[i].agent_id}).second) {
      lost_now.push_back(rec.members[i].agent_id);
    }
  }
  for (const std::string& lost_agent : lost_now) {
    const int lost = std::stoi(lost_agent.substr(5));
    if (lost == 0) Fail("(c) the coordinator declared its own node lost");
    const auto limit = rdzv_.keep_alive_interval * rdzv_.keep_alive_max_attempt;
    const SimAgent& x = agents_[lost];
    bool silent = x.crashed || x.exit || x.signalled;  // (a signalled agent leaves)
    // Time the store host was stopped is nobody's silence (no keep-alive reaches it), so its
    // own pause may have ended that much longer ago.
    const auto host_stopped = [this](Time from) {
      Time::duration sum{};
      for (const auto& [start, end] : agents_[0].pauses) {
        const Time a = std::max(start, from);
        const Time b = std::min(end, now_);
        if (b > a) sum += b - a;
      }
      return sum;
    };
    for (const auto& [start, end] : x.pauses) {
      silent |=
          start <= now_ && end >= now_ - limit - rdzv_.keep_alive_interval - host_stopped(end);
    }
    if (!silent || (!x.signalled && now_ - x.last_beat < limit)) {
      Fail("(c) " + lost_agent + " declared lost " +
           std::to_string(std::chrono::duration_cast<Ms>(now_ - x.last_beat).count()) +
           " ms after its last keep-alive, though it was not paused or killed");
    }
  }
  if (rec.round >= 0 && rounds_[rec.round].closed == Time{}) {
    rounds_[rec.round].closed = now_;
    // (g): a round never closes with an agent that had already left it (a
    // signalled agent withdraws its join as it leaves).
    // (h): nor with an agent killed longer than the keep-alive limit before
    // (plus a beat, and the coordinator's poll), unless the coordinator
    // itself was stopped meanwhile (it restarts its silence clocks).
    const auto silent = rdzv_.keep_alive_interval * (rdzv_.keep_alive_max_attempt + 1) + kWaitSlack;
    for (int k = 0; k < static_cast<int>(rec.members.size()); ++k) {
      const NodeInfo& m = rec.members[k];
      const SimAgent& x = agents_[std::stoi(m.agent_id.substr(5))];
      if (x.exit && x.signalled) {
        Fail("(g) round " + std::to_string(rec.round) + " closed with " + m.agent_id +
             ", which had left at " + std::to_string(Seconds(x.exit_time)) + " s");
      }
      if (x.crashed && now_ - x.crash_time > silent && !Hindered(0, x.crash_time, now_)) {
        Fail("(h) round " + std::to_string(rec.round) + " closed with " + m.agent_id +
             ", killed at " + std::to_string(Seconds(x.crash_time)) + " s");
      }
      // (h): under static, node rank k is the agent that asked for it.
      if (static_ && x.requested_rank != k) {
        Fail("(h) round " + std::to_string(rec.round) + " gave node rank " + std::to_string(k) +
             " to " + m.agent_id + ", which asked for " + std::to_string(x.requested_rank));
      }
    }
  }
  if (rec.round >= 0 && std::find(rec.done.begin(), rec.done.end(), true) != rec.done.end()) {
    rounds_[rec.round].done_recorded = true;
  }
  if (rec.round >= 0 && rec.end != RoundEnd::kNone) {
    rounds_[rec.round].ended = std::min(rounds_[rec.round].ended, now_);
  }
  WakeAll();
}

void Sim::CheckEnd() {
  std::optional<Action> first;
  for (const auto& a : agents_) {
    if (a.crashed) continue;
    if (!a.exit) {
      Fail("an agent did not exit within the horizon: " + a.id);
      continue;
    }
    if (a.signalled || store_down_) continue;  // its own exit code, or no record to read
    const Action& e = *a.exit;
    if (e.kind == ActionKind::kExit && e.exit_code != 0 && !e.failed) {
      // Only a node with no place in a full job may leave on its own.
      if (e.message.find("for a place in the job") == std::string::npos) {
        Fail("(d) " + a.id + " exited " + std::to_string(e.exit_code) +
             " on its own: " + e.message);
      }
      continue;
    }
    if (!final_ || e.exit_code != final_->exit_code()) {
      Fail("(d) " + a.id + " exited " + std::to_string(e.exit_code) + ", the record says " +
           std::to_string(final_ ? final_->exit_code() : -1));
    }
    // A success may come with a note of this agent's own (it never ran).
    if (first && e.failed && e.message != first->message) {
      Fail("(d) agents print different root causes: \"" + first->message + "\" and \"" + e.message +
           "\"");
    }
    if (!first) first = e;
  }
  // (d): a peer's death is the root cause only when the failure that caused
  // it could not be recorded in time (its agent paused, killed or stopped).
  if (final_ && final_->outcome == JobOutcome::kFailed &&
      final_->final_cause.cls == FailureClass::kPeer && !store_down_) {
    const RoundPlan& plan = rounds_[final_->round];
    if (plan.primary &&
        !Hindered(plan.primary->first, plan.primary->second, plan.primary_learned + peer_settle_)) {
      Fail("(d) the root cause is a peer's death (" + final_->final_cause.Describe() + ") though " +
           agents_[plan.primary->first].id + "'s worker failed first");
    }
  }
}

bool Sim::SilentPastLimit(int i, Time from) const {
  const auto limit = rdzv_.keep_alive_interval * rdzv_.keep_alive_max_attempt;
  if (agents_[i].crashed) return true;
  for (int j : {i, 0}) {
    for (const auto& [start, end] : agents_[j].pauses) {
      if (end - std::max(start, from) > limit) return true;
    }
  }
  return false;
}

bool Sim::Hindered(int i, Time from, Time to) const {
  const SimAgent& a = agents_[i];
  if (a.signalled || (a.crashed && a.crash_time <= to)) return true;
  for (int j : {i, 0}) {
    for (const auto& [start, end] : agents_[j].pauses) {
      if (start <= to && end >= from) return true;
    }
  }
  return false;
}

}  // namespace ddprun::rendezvous::sim
