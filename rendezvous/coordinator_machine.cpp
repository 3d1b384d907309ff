#include "rendezvous/coordinator_machine.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "rendezvous/agent_machine.hpp"

namespace ddprun::rendezvous {

namespace {

constexpr std::chrono::milliseconds kPoll{200};

std::string Describe(const NodeInfo& n, int rank) {
  return n.name + " (" + n.addr + ", node rank " + std::to_string(rank) + ")";
}

}  // namespace

CoordinatorMachine::CoordinatorMachine(RendezvousSettings settings, std::string self_agent_id,
                                       Log log)
    : s_(std::move(settings)),
      self_(std::move(self_agent_id)),
      log_(std::move(log)),
      keys_(s_.run_id) {}

StatusOr<bool> CoordinatorMachine::Step(Kv& kv, Time now) {
  if (last_step_) {
    // How much later than the wake it asked for this step comes: this process
    // did not run (SIGSTOP, a starved host), or its own store did not answer.
    // It saw no keep-alive meanwhile (none reaches a stopped store), so that
    // time is no member's silence; and no agent could join then, so it does
    // not count against the round's join timeout and last call either.
    // Measured from the wake it asked for, not from its last step: against a
    // keep_alive_interval shorter than its poll, every step was a pause that
    // reset every clock, so no node was ever lost and no last call ended; and
    // a host starved in turns never found a killed node (attack 107).
    const Clock::duration late = now - std::max(*last_step_, next_wake_);
    if (late > Clock::duration::zero()) {
      const auto later = [&](Time& t) { t = std::min(now, t + late); };
      for (auto& [agent, seen] : seen_) later(seen.second);
      for (auto& [agent, heard] : heard_) later(heard.second);
      for (auto& [arrival, since] : unwritten_) later(since);
      gather_start_ += late;
      if (last_call_until_) *last_call_until_ += late;
      if (late > s_.keep_alive_interval) resumed_at_ = now;
    }
  }
  last_step_ = now;
  next_wake_ = now + kPoll;
  auto rec = ReadRecord(kv, keys_);
  if (!rec.ok()) return rec.status();
  wake_key_ = keys_.Version(rec->version + 1);
  if (rec->final()) return false;
  if (rec->round >= 0 && rec->end == RoundEnd::kNone) return Watch(kv, *rec, now);
  return Gather(kv, *rec, now);
}

StatusOr<bool> CoordinatorMachine::Apply(Kv& kv, const Transition& t) {
  auto applied = ApplyTransition(kv, keys_, t);
  if (!applied.ok()) return applied.status();
  wake_key_ = keys_.Version(applied->record.version + 1);
  return !applied->record.final();
}

StatusOr<bool> CoordinatorMachine::Silent(Kv& kv, const std::string& id, Time now) {
  if (id == self_) return false;
  auto count = kv.Add(keys_.KeepAlive(id), 0);
  if (!count.ok()) return count.status();
  auto [it, first] = heard_.try_emplace(id, *count, now);
  if (!first && it->second.first != *count) it->second = {*count, now};
  return now - it->second.second > s_.KeepAliveLimit();
}

StatusOr<CoordinatorMachine::Present> CoordinatorMachine::Arrivals(Kv& kv, const JobRecord& rec,
                                                                   int r, Time now) {
  Present present;
  auto joined = kv.Add(keys_.Join(r), 0);
  if (!joined.ok()) return joined.status();
  const auto limit = s_.KeepAliveLimit();
  for (int i = 0; i < *joined; ++i) {
    auto text = kv.TryGet(keys_.Node(r, i));
    if (!text.ok()) return text.status();
    if (!*text) {
      // Its agent bumped the counter a moment ago; one killed in between
      // never writes it.
      auto [it, first] = unwritten_.try_emplace({r, i}, now);
      present.unsettled |= now - it->second <= limit;
      continue;
    }
    auto node = NodeInfo::Decode(**text);
    if (!node.ok()) return node.status();
    // Those who withdrew are among the arrivals; they do not count. (A
    // withdrawal recorded is of the round being gathered, rec.round + 1.)
    if (r == rec.round + 1 && rec.Withdrew(node->agent_id)) continue;
    auto silent = Silent(kv, node->agent_id, now);
    if (!silent.ok()) return silent.status();
    if (*silent) {
      present.silent += node->agent_id + "\n";
      if (told_silent_.insert(std::to_string(r) + "/" + node->agent_id).second) {
        std::ostringstream why;
        why << "rendezvous: " << node->name << " (" << node->addr << ", agent " << node->agent_id
            << "), which joined round " << r << ", has sent no keep-alive for "
            << std::chrono::duration<double>(limit).count()
            << " s (killed, or stopped): it is not counted in the round unless it beats again";
        log_(why.str());
      }
      continue;
    }
    if (s_.exclusive_ranks && node->requested_rank >= 0) {
      auto holder = kv.TryGet(keys_.Claim(node->requested_rank));
      if (!holder.ok()) return holder.status();
      if (!*holder || **holder != node->Encode()) {
        present.unsettled = true;
        continue;
      }
    }
    present.nodes.push_back(std::move(*node));
  }
  return present;
}

void CoordinatorMachine::TellWithdrawn(const JobRecord& rec, int r) {
  if (told_withdrawn_.first != r) told_withdrawn_ = {r, {}};
  for (const Withdrawal& w : rec.withdrawn) {
    if (!told_withdrawn_.second.emplace(w.agent_id, w.reason).second) continue;
    log_("rendezvous: " + w.reason + " before round " + std::to_string(r) +
         " formed: it forms without it");
  }
}

StatusOr<bool> CoordinatorMachine::Gather(Kv& kv, const JobRecord& rec, Time now) {
  const int r = rec.round + 1;
  if (gathering_ != r) {
    gathering_ = r;
    gather_start_ = now;
    last_call_until_.reset();
    unwritten_.erase(unwritten_.begin(), unwritten_.lower_bound({r, 0}));
    // The last keep-alives the watch of the round before saw: a member
    // silent since then is not given a fresh limit.
    for (const auto& [agent, seen] : seen_) {
      if (seen.first >= 0) heard_[agent] = seen;
    }
  }
  TellWithdrawn(rec, r);
  auto present = Arrivals(kv, rec, r, now);
  if (!present.ok()) return present.status();
  if (static_cast<int>(present->nodes.size()) < s_.min_nodes) {
    auto lost = LostBeforeRejoin(kv, rec, *present, now);
    if (!lost.ok()) return lost.status();
    if (lost->has_value()) return **lost;
  }
  if (published_silent_ != std::pair(r, present->silent)) {
    // For the waiting agents' progress lines: who is not counted, and why.
    if (Status s = kv.Set(keys_.Silent(r), present->silent); !s.ok()) return s;
    published_silent_ = {r, present->silent};
  }
  const int n = std::min(static_cast<int>(present->nodes.size()), s_.max_nodes);
  if (n < s_.min_nodes) last_call_until_.reset();
  if (n >= s_.min_nodes && !last_call_until_) last_call_until_ = now + s_.last_call_timeout;
  const bool closing =
      !present->unsettled && (n >= s_.max_nodes || (n >= s_.min_nodes && now >= *last_call_until_));
  if (closing) {
    present->nodes.resize(n);
    auto members = AssignRanks(std::move(present->nodes));
    return Apply(kv, [&](const JobRecord& cur) { return CloseRound(cur, r, members); });
  }
  // (Past the last call while an arrival is unsettled: the poll.)
  if (last_call_until_ && *last_call_until_ > now) {
    next_wake_ = std::min(next_wake_, *last_call_until_);
  }
  auto joined = kv.Add(keys_.Join(r), 0);
  if (!joined.ok()) return joined.status();
  wake_key_ = keys_.Node(r, static_cast<int>(*joined));  // the next arrival
  if (n >= s_.min_nodes || now < gather_start_ + s_.join_timeout) return true;
  Cause c;
  c.cls = FailureClass::kRendezvous;
  c.what = JoinTimeoutReport(kv, keys_, s_, rec, r);
  log_(c.what);
  return Apply(kv, [&](const JobRecord& cur) { return CloseJob(cur, c); });
}

StatusOr<std::optional<bool>> CoordinatorMachine::LostBeforeRejoin(Kv& kv, const JobRecord& rec,
                                                                   const Present& present,
                                                                   Time now) {
  const int r = rec.round + 1;
  if (rec.round < 0 || rec.restarts < s_.max_restarts ||
      (rec.end != RoundEnd::kMembership && rec.end != RoundEnd::kNewNodes)) {
    return std::optional<bool>();
  }
  std::vector<std::string> arrived, lost;
  for (const NodeInfo& n : present.nodes) arrived.push_back(n.agent_id);
  std::string named;
  for (size_t i = 0; i < rec.members.size(); ++i) {
    const std::string& id = rec.members[i].agent_id;
    if (id == rec.lost_agent || rec.Withdrew(id) ||
        std::find(arrived.begin(), arrived.end(), id) != arrived.end()) {
      continue;
    }
    auto silent = Silent(kv, id, now);
    if (!silent.ok()) return silent.status();
    if (!*silent) continue;
    lost.push_back(id);
    named += (named.empty() ? "" : " and ") + Describe(rec.members[i], static_cast<int>(i));
  }
  if (lost.empty()) return std::optional<bool>();
  const auto limit = s_.KeepAliveLimit();
  std::ostringstream why;
  why << "lost " << named << ": no keep-alive for " << std::chrono::duration<double>(limit).count()
      << " s, before rejoining after round " << rec.round << " ended";
  auto applied = ApplyTransition(kv, keys_, [&](const JobRecord& cur) {
    return LoseBeforeRejoin(cur, r, why.str(), lost, s_.min_nodes, arrived, s_.max_restarts);
  });
  if (!applied.ok()) return applied.status();
  if (!applied->landed) return std::optional<bool>();  // enough remain, or the record moved on
  log_("rendezvous: " + why.str());
  wake_key_ = keys_.Version(applied->record.version + 1);
  return std::optional<bool>(!applied->record.final());
}

// New nodes may make a round re-form only while training goes on and every
// member answers: not once a member's workers finished, and not while a
// member is silent (paused, or this coordinator has not heard from it since
// its own pause), since its workers may have finished meanwhile.
bool CoordinatorMachine::AllResponsive(const JobRecord& rec, Time now) const {
  for (size_t i = 0; i < rec.members.size(); ++i) {
    if (rec.done[i]) return false;
    auto seen = seen_.find(rec.members[i].agent_id);
    if (seen == seen_.end()) return false;
    const Time when = seen->second.second;
    if (when <= resumed_at_ || now - when > 2 * s_.keep_alive_interval) return false;
  }
  return true;
}

StatusOr<Clock::duration> CoordinatorMachine::Quiet(Kv& kv, const std::string& id, Time now) {
  auto count = kv.Add(keys_.KeepAlive(id), 0);
  if (!count.ok()) return count.status();
  auto& [last, when] = seen_[id];
  if (*count != last) {
    last = *count;
    when = now;
  }
  return now - when;
}

StatusOr<bool> CoordinatorMachine::Watch(Kv& kv, const JobRecord& rec, Time now) {
  const int r = rec.round;
  if (watching_ != r) {
    watching_ = r;
    seen_.clear();
    for (const auto& m : rec.members) seen_[m.agent_id] = {-1, now};
  }
  // Once a member's workers finished, the training is over: a member lost
  // then is no longer awaited (the job completes without it), and no round
  // re-forms to train again.
  const int finished = static_cast<int>(std::count(rec.done.begin(), rec.done.end(), true));
  const auto limit = s_.KeepAliveLimit();
  for (size_t i = 0; i < rec.members.size(); ++i) {
    const NodeInfo& m = rec.members[i];
    // Never itself (it runs in the agent it would declare lost), never a
    // member whose workers finished (it only waits for the others).
    if (rec.done[i] || rec.gone[i]) continue;
    auto silent_for = Quiet(kv, m.agent_id, now);
    if (!silent_for.ok()) return silent_for.status();
    if (m.agent_id == self_ || *silent_for <= limit) continue;
    std::ostringstream why;
    why << "lost " << Describe(m, static_cast<int>(i)) << ": no keep-alive for "
        << std::chrono::duration<double>(limit).count() << " s";
    if (finished > 0) {
      const std::string gone = why.str() + ", after the workers of " + std::to_string(finished) +
                               " of " + std::to_string(rec.members.size()) + " nodes finished";
      log_("rendezvous: " + gone + ": the job completes without it");
      return Apply(kv, [&](const JobRecord& cur) { return ExcuseLost(cur, r, gone, m.agent_id); });
    }
    // Others killed with it (their keep-alives stopped a moment apart):
    // those past the limit are lost with it, not counted as remaining; those
    // silent for more than two beats are named (attack 88).
    std::vector<std::string> also_lost;
    std::string also, quiet;
    for (size_t j = 0; j < rec.members.size(); ++j) {
      const NodeInfo& o = rec.members[j];
      if (j == i || rec.done[j] || rec.gone[j] || o.agent_id == self_) continue;
      auto silent = Quiet(kv, o.agent_id, now);
      if (!silent.ok()) return silent.status();
      if (*silent > limit) {
        also_lost.push_back(o.agent_id);
        also += " and " + Describe(o, static_cast<int>(j));
      } else if (*silent > 2 * s_.keep_alive_interval) {
        std::ostringstream q;
        q << (quiet.empty() ? "" : ", ") << Describe(o, static_cast<int>(j)) << " for "
          << std::fixed << std::setprecision(1) << std::chrono::duration<double>(*silent).count()
          << " s";
        quiet += q.str();
      }
    }
    if (!also.empty()) {
      why.str("");
      why << "lost " << Describe(m, static_cast<int>(i)) << also << ": no keep-alive for "
          << std::chrono::duration<double>(limit).count() << " s";
    }
    if (!quiet.empty()) why << " (silent too: " << quiet << ")";
    log_("rendezvous: " + why.str());
    auto joining = JoinedAgents(kv, keys_, r + 1);
    if (!joining.ok()) return joining.status();
    return Apply(kv, [&](const JobRecord& cur) {
      return EndRoundByMembership(cur, r, why.str(), m.agent_id, s_.min_nodes, *joining,
                                  s_.max_restarts, also_lost);
    });
  }
  TellWithdrawn(rec, r + 1);
  auto joiners = Arrivals(kv, rec, r + 1, now);
  if (!joiners.ok()) return joiners.status();
  const size_t waiting = joiners->nodes.size();
  if (waiting > 0 && static_cast<int>(rec.members.size()) < s_.max_nodes &&
      AllResponsive(rec, now)) {
    const std::string why = std::to_string(waiting) + " new node(s) waiting to join";
    log_("rendezvous: round " + std::to_string(r) + " ends: " + why);
    return Apply(kv, [&](const JobRecord& cur) { return EndRoundForNewNodes(cur, r, why); });
  }
  return true;
}

}  // namespace ddprun::rendezvous
