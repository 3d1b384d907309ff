// An agent's decisions about rounds and the job, as a state machine with no
// threads, sockets or clock of its own: Step() reads the job record and the
// round keys through a Kv at a given time and says what to do next (clear
// the workers' key space, start or stop the workers, exit with a code); the caller
// carries that out and feeds back what the workers did. The real agent
// drives it over TCP (agent_driver.hpp); the simulation (tests/sim/) drives
// many of them over one in-process store with a fake clock.
//
// Every decision that others must share goes through the job record: the
// round and its members, the restart count, a failure (the first recorded
// one is the root cause), a node's workers finishing, the job's outcome. The
// machine exits only on a final record, or when the store is gone, or when
// ddprun itself was signalled (then with 128+N).
//
// Lifecycle: Join -> WaitRound -> Clearing -> Running -> (workers exit)
// Exited -> [Settling] -> Finishing | Join | Done.
//
// Thread-compatible: the caller serialises calls (the driver holds a mutex).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "rendezvous/job_record.hpp"
#include "rendezvous/kv.hpp"
#include "rendezvous/rendezvous.hpp"

namespace ddprun::rendezvous {

struct AgentSettings {
  RendezvousSettings rdzv;
  NodeInfo self;
  // --role: one per job (ROLE_RANK and ROLE_WORLD_SIZE are RANK and WORLD_SIZE).
  std::string role = "default";
  bool hosts_store = false;
  // How long a failure of the kPeer class (a worker that died because a peer
  // went away) waits before it is recorded, so that the failure that caused
  // it, on another node, is recorded first.
  std::chrono::milliseconds peer_settle{2000};
  // How often the machine wants to look at the store while nothing happens.
  std::chrono::milliseconds poll{200};
  // The store failed while this node's workers ran (its host died, say, as the
  // job ended): how long they may go on to end by themselves before they are
  // stopped. A job at its end then finishes on every node alike; workers whose
  // peers are gone fail in their collectives.
  std::chrono::milliseconds store_gone_grace{5000};
};

// What this node's workers did in a round.
struct WorkersOutcome {
  enum class Kind { kSucceeded, kFailed, kStopped, kInterrupted };
  Kind kind = Kind::kSucceeded;
  Cause cause;  // kFailed: the local root cause (the machine fills in the node)
  // kFailed: the failure may be a consequence of one on another node (every
  // local rank hung inside a collective that a rank elsewhere may never have
  // entered): recorded after the peer settle time, as a kPeer one.
  bool settle = false;
  int signal = 0;           // kInterrupted: the signal ddprun received
  std::string signal_name;  // "SIGTERM"
};

enum class ActionKind { kWait, kClearWorkerStore, kStartWorkers, kStopWorkers, kExit };

struct Action {
  ActionKind kind = ActionKind::kWait;
  RoundResult round;  // kClearWorkerStore, kStartWorkers
  // kStopWorkers: why; kExit: what to print ("" on success); kWait: progress
  // to tell ("" mostly; while a round forms, which nodes joined, now and then)
  std::string message;
  int exit_code = 0;    // kExit
  bool failed = false;  // kExit: the record says the job failed (root_cause is set)
  // kExit: another agent took this node's rank while it was stopped: what its
  // workers did last is not the job's failure.
  bool displaced = false;
  // kExit: the rendezvous store went away, stopped answering or could not be
  // reached (a rendezvous failure, though no record says so).
  bool store_lost = false;
  Cause root_cause;  // kExit with `failed`: the one recorded root cause
  // kExit on a signal between rounds: how the last round ended as recorded, when
  // not by this node ("lost host-b (...)", another node's failure): what this
  // node's failed workers were victims of (attack 95).
  std::string round_ended;
};

class AgentMachine {
 public:
  enum class Phase {
    kJoin,
    kWaitRound,
    kClearing,
    kRunning,
    kStopping,
    kExited,
    kFinishing,
    // The store failed while this node's workers ran: they may end by
    // themselves within store_gone_grace, else they are stopped; what they did
    // decides the exit (all exited 0 by themselves: 0).
    kStoreGone,
    kDone
  };

  using Time = Clock::time_point;

  explicit AgentMachine(AgentSettings settings);

  // Advances with what the store says at `now`. kWait: call again by
  // next_wake(), or sooner when the record may have changed.
  Action Step(Kv& kv, Time now);
  // The caller emptied the store's workers' key space (after kClearWorkerStore).
  void WorkerStoreCleared() { cleared_ = true; }
  // The workers of the running round are gone (after kStartWorkers).
  void WorkersExited(const WorkersOutcome& outcome, Time now);
  // A worker of the running round failed (kFailed), and the others are being
  // stopped (their grace may be long): the round is ended by that failure at
  // the next step, so that the other nodes stop theirs now and it is the root
  // cause before their workers fail of it. A failure that may be another
  // node's (kPeer, settle) waits for the workers' exit as before.
  void FailedEarly(const WorkersOutcome& outcome, Time now);
  // ddprun received a terminating signal; the machine leaves at its next step.
  void Interrupted(int signal, std::string name) {
    signal_ = signal;
    signal_name_ = std::move(name);
  }

  // ddprun received a terminating signal and the store did not answer the
  // request this agent was blocked in (abandoned; `store` is its address):
  // the agent leaves without a word to the others, who lose it by keep-alive.
  Action Abandoned(int signal, std::string name, const std::string& store);
  // Since the last Step began, this agent's requests waited this long for the
  // store's replies while it ran (the caller measures it; StoreClient::Waited):
  // that much of the gap before the next Step is the store's silence, not
  // this agent's absence. Without it every gap counts as absence.
  void WaitedForStore(std::chrono::milliseconds waited) { waited_ += waited; }
  // After a Step that returned `action` (kExit, or kStopWorkers in
  // kStoreGone), which took `took` by the clock, `waited` of it waiting for
  // the store's replies while running (the caller measures both): a store
  // found gone at the end of a step this agent was stopped inside of (SIGSTOP
  // during a request) is told as a pause of that length, as one between steps
  // is; one that did not answer for long before it went, as that. Returns the
  // step's action, amended so: only its message (the same decision, taken
  // again from the phase the store was found gone in; attack 101: an exit 0
  // for workers that had all succeeded became an exit 1).
  Action StepTook(std::chrono::milliseconds took, std::chrono::milliseconds waited, Action action);

  Phase phase() const { return phase_; }
  Time next_wake() const { return next_wake_; }
  // The store key whose appearance should wake the caller before
  // next_wake(): the record's next version, or in kClearing the key node rank
  // 0 sets once the workers' key space is clean.
  std::string wake_key() const;
  const AgentSettings& settings() const { return s_; }

 private:
  // One per phase; `rec` is the record as the step read it.
  Action Join(Kv& kv, const JobRecord& rec, Time now);
  // exclusive_ranks: claims the node rank, or takes it over from a holder
  // silent past the keep-alive limit or found lost in `rec` (a wait action
  // telling so). An exit
  // action when a live agent holds it, or when another took it from this
  // one; nullopt otherwise (the claim may still be contested: the agent
  // joins meanwhile, and the coordinator does not count it).
  std::optional<Action> ClaimRank(Kv& kv, const JobRecord& rec, Time now);
  // The agent that held the rank this one took over joined the round being
  // gathered: it withdraws it, so the round never closes with it.
  void WithdrawDisplaced(Kv& kv, const NodeInfo& holder, const std::string& reason);
  // The first agent to join records the settings all must share; an exit
  // action (exit 2) when this agent's differ (under static before the first
  // round, the whole job's: it cannot form without this node).
  std::optional<Action> CheckSettings(Kv& kv, const JobRecord& rec);
  Action WaitRound(Kv& kv, const JobRecord& rec, Time now);
  Action Clearing(Kv& kv, const JobRecord& rec, Time now);
  Action Running(const JobRecord& rec, Time now);
  Action RecordEarlyFailure(Kv& kv, const JobRecord& rec, Time now);
  Action Exited(Kv& kv, const JobRecord& now_rec, Time now);
  Action Finishing(Kv& kv, const JobRecord& rec, Time now);
  Action Leave(Kv& kv);
  // Acts on a record in which our round no longer runs: exit when it is
  // final, else join the next round.
  Action Follow(Kv& kv, const JobRecord& rec, Time now);
  Action Exit(int code, std::string message);
  Action ExitByRecord(const JobRecord& rec);
  // ExitByRecord for an agent that has not run the final round's workers,
  // saying so when an agent started in its place had taken its node rank.
  Action JobOver(Kv& kv, const JobRecord& rec);
  Action StoreGone(const Status& s);
  Action AfterStoreGone(Time now);
  // Exits 0 after the store failed: this node's workers had all exited 0.
  Action ExitWorkersSucceeded();
  StatusOr<Applied> Apply(Kv& kv, const Transition& t);
  StatusOr<JobRecord> Read(Kv& kv);
  // How `rec`'s last round ended when not by this node's failure; "" else.
  std::string RoundEndedElsewhere(const JobRecord& rec) const;
  RoundResult Result(const JobRecord& rec, int node_rank) const;
  Status Beat(Kv& kv, Time now);
  Action Wait(Time now, std::optional<Time> until = std::nullopt);

  AgentSettings s_;
  RendezvousKeys keys_;
  Phase phase_ = Phase::kJoin;
  Action done_;           // in kDone: the exit action, repeated
  int round_ = -1;        // the round joined or running
  int node_rank_ = -1;    // in the running round
  int min_round_ = 0;     // do not join a round before this one
  Time deadline_{};       // kWaitRound: join_timeout
  Time next_progress_{};  // kWaitRound: when the wait is next told (kWait's message)
  static constexpr std::chrono::seconds kFirstProgress{5};
  static constexpr std::chrono::seconds kProgressEvery{30};
  std::optional<Time> first_join_;
  bool cleared_ = false;
  bool rank_claimed_ = false;  // exclusive_ranks: the claim key holds our NodeInfo
  // exclusive_ranks: another agent holds our rank; whether it still beats.
  struct Contest {
    std::string holder;  // the claim key's value
    int64_t beats = 0;   // its keep-alive counter when first read
    Time since{};
  };
  std::optional<Contest> contest_;
  bool settings_checked_ = false;
  bool ran_workers_ = false;  // in some round of this job
  WorkersOutcome outcome_;
  std::optional<WorkersOutcome> early_;  // FailedEarly's, until recorded
  // A final record read or made while the workers ran or stopped (this
  // node's early failure ended the job, or another agent did): the job's
  // end, known here even if the store is gone before the workers have
  // stopped (their grace outlasting the store host's wait).
  std::optional<JobRecord> final_seen_;
  Time settle_until_{};
  int signal_ = 0;
  std::string signal_name_;
  Time next_beat_{};
  std::optional<Time> last_step_;
  std::chrono::milliseconds away_{0};  // the longest time it did not run, since its round began
  std::optional<Status> gone_;         // the store failure the agent exited for
  // StoreGone ran in the Step now ending, from this phase: what StepTook
  // amends is decided again from there, never an exit decided otherwise.
  std::optional<Phase> gone_in_step_;
  std::string gone_message_;             // kStoreGone: what to say of it
  bool outcome_known_ = false;           // kStoreGone: WorkersExited came
  std::string previous_end_;             // why the last round this node ran in ended
  std::optional<Time> stop_at_;          // kStoreGone: when the workers are stopped
  bool stop_asked_ = false;              // kStoreGone: they are being stopped
  std::chrono::milliseconds waited_{0};  // WaitedForStore since the last Step
  std::chrono::milliseconds silent_{0};  // the store's request before it went took this long
  Time next_wake_{};
  int64_t version_ = 0;
};

// "1.5 s", "15 s", "20.096 s": a duration as the agent's messages give it.
std::string DurationText(std::chrono::milliseconds d);

// The message of a round that could not form within join_timeout, naming the
// nodes seen and the requested node ranks missing (coordinator and agents).
std::string JoinTimeoutReport(Kv& kv, const RendezvousKeys& keys, const RendezvousSettings& s,
                              const JobRecord& rec, int round);

}  // namespace ddprun::rendezvous
