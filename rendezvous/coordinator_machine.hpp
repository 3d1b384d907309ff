// The coordinator's decisions, as a state machine with no threads, sockets or
// clock of its own (the thread that drives it over TCP is coordinator.hpp;
// the simulation drives it over an in-process store with a fake clock).
//
// It runs on the agent hosting the store and writes the job record through
// compare-and-set like any agent: it closes a round (MAX joined, or MIN
// joined and the last call expired) with the members in rank order; it fails
// the job when MIN do not join within join_timeout; while a round runs it
// watches the members' keep-alive counters and ends the round when a member
// is lost (never itself, never a member whose workers finished) or when new
// agents wait to join and there is room. An arrival silent past the
// keep-alive limit (killed or stopped while it waits) counts for neither.
//
// Every Step re-reads the record first, so a coordinator that was paused
// acts on what happened meanwhile; and after a pause it restarts its
// keep-alive clocks, since it could not watch anyone while it was stopped.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/job_record.hpp"
#include "rendezvous/kv.hpp"

namespace ddprun::rendezvous {

class CoordinatorMachine {
 public:
  using Time = Clock::time_point;
  using Log = std::function<void(const std::string&)>;

  CoordinatorMachine(RendezvousSettings settings, std::string self_agent_id, Log log);

  // One look at the store at `now`; false when the job is over and there is
  // nothing left to coordinate. Fails when the store does.
  StatusOr<bool> Step(Kv& kv, Time now);

  Time next_wake() const { return next_wake_; }
  // The store key whose appearance should wake the caller before
  // next_wake(): while a round gathers, the next arrival's record; else the
  // job record's next version.
  const std::string& wake_key() const { return wake_key_; }

 private:
  StatusOr<bool> Gather(Kv& kv, const JobRecord& rec, Time now);
  StatusOr<bool> Watch(Kv& kv, const JobRecord& rec, Time now);
  StatusOr<bool> Apply(Kv& kv, const Transition& t);
  bool AllResponsive(const JobRecord& rec, Time now) const;
  // The arrivals of round `r` that count: in arrival order, those that did
  // not withdraw, sent a keep-alive within the limit (an agent killed or
  // stopped while it waits is not closed in; it counts again once it
  // beats), and, with exclusive ranks, hold their rank's claim.
  struct Present {
    std::vector<NodeInfo> nodes;
    // An arrival waits for a rank another agent holds (its place is being
    // taken over, or the job fails as the rank was claimed twice), or its
    // record is not written yet: the round does not close meanwhile.
    bool unsettled = false;
    std::string silent;  // the agent ids not counted for silence, one per line
  };
  StatusOr<Present> Arrivals(Kv& kv, const JobRecord& rec, int r, Time now);
  // While round rec.round + 1 gathers with fewer than MIN: members of the
  // round before that have not rejoined and are silent past the keep-alive
  // limit are lost (LoseBeforeRejoin: the job fails when no restart is
  // left). The result of Step when that landed, else nullopt.
  StatusOr<std::optional<bool>> LostBeforeRejoin(Kv& kv, const JobRecord& rec,
                                                 const Present& present, Time now);
  // How long member `id` of the running round has sent no keep-alive, as
  // this coordinator watched it (seen_), its counter read now.
  StatusOr<Clock::duration> Quiet(Kv& kv, const std::string& id, Time now);
  // Whether agent `id` sent no keep-alive for the limit, as this coordinator
  // has watched it (never itself).
  StatusOr<bool> Silent(Kv& kv, const std::string& id, Time now);
  // Logs each agent that withdrew from round `r` once.
  void TellWithdrawn(const JobRecord& rec, int r);

  RendezvousSettings s_;
  std::string self_;
  Log log_;
  RendezvousKeys keys_;
  int gathering_ = -1;  // the round being gathered
  Time gather_start_{};
  std::optional<Time> last_call_until_;
  int watching_ = -1;                                      // the round being watched
  std::map<std::string, std::pair<int64_t, Time>> seen_;   // agent -> (counter, when it changed)
  std::map<std::string, std::pair<int64_t, Time>> heard_;  // the same for arrivals
  std::map<std::pair<int, int>, Time> unwritten_;          // (round, arrival) -> when first missing
  std::set<std::string> told_silent_;                      // "round/agent" logged as not counted
  std::pair<int, std::string> published_silent_{-1, ""};   // (round, Keys::Silent's value)
  std::optional<Time> last_step_;
  Time resumed_at_{};  // when this coordinator last came back from a pause
  Time next_wake_{};
  std::string wake_key_;
  // The round whose withdrawals were logged, and the ones logged (agent, reason): by
  // content, since a Rejoin takes an entry out of the record's list.
  std::pair<int, std::set<std::pair<std::string, std::string>>> told_withdrawn_{-1, {}};
};

}  // namespace ddprun::rendezvous
