// Deterministic simulation of elastic jobs: N agents (AgentMachine) and the
// coordinator (CoordinatorMachine) of ddprun run over one in-process store
// (the real StoreState behind LocalStore) with a fake clock and a seeded
// scheduler. The scheduler injects what the real world does to a job:
// worker failures and the peers that die of them, agent pauses (SIGSTOP,
// longer than the keep-alive limit), agent crashes (SIGKILL: its workers die
// with it), the store host paused (every store request waits) or killed (the
// store is gone), late joiners, SIGTERM to an agent, and delays on every step
// and every report of a worker's exit.
//
// After every step it checks the invariants of docs/elastic-invariants.md
// (a..f) and at the end that every agent exited in time. A failing seed
// reproduces exactly: `elastic_sim --seed N --trace`.
//
//   elastic_sim [--seeds K] [--first S] [--seed N] [--trace]
//
// Prints one line per failing seed and a footer; exits 1 when any failed.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/agent_machine.hpp"
#include "rendezvous/coordinator_machine.hpp"
#include "rendezvous/job_record.hpp"
#include "rendezvous/kv.hpp"

namespace ddprun::rendezvous {
namespace {

using Time = Clock::time_point;
using Ms = std::chrono::milliseconds;

constexpr int kSigterm = 15;
constexpr int kSigpipeCode = 128 + 13;
const Time kOrigin = Time(std::chrono::hours(1));
constexpr Ms kHorizon{400000};  // every agent must have exited by then
constexpr Ms kWaitSlack{1000};  // (f): poll interval and step delays

double Seconds(Time t) { return std::chrono::duration<double>(t - kOrigin).count(); }

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  // Uniform in [lo, hi]; portable (no std distributions).
  int64_t In(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(g_() % (hi - lo + 1)); }
  bool Chance(int percent) { return In(0, 99) < percent; }
  Ms Delay(int64_t lo, int64_t hi) { return Ms(In(lo, hi)); }

 private:
  std::mt19937_64 g_;
};

struct Workers {
  bool running = false;
  int round = -1;
  std::optional<WorkersOutcome> exited;  // not yet told to the agent
};

struct SimAgent {
  std::string id;
  std::optional<AgentMachine> machine;
  std::optional<LocalStore::Handle> kv;
  Time start{};
  Time paused_until{};   // SIGSTOP until then
  Time starved_until{};  // its agent loop cannot run (starved, a slow dump), the rest of it can
  bool crashed = false;
  Time crash_time{};
  std::vector<std::pair<Time, Time>> pauses;
  bool signalled = false;
  std::optional<Action> exit;
  Time exit_time{};
  Workers workers;
  uint64_t token = 0;  // the one step event that counts
  Time last_beat{};
  int64_t beats = 0;
  // (f): when it started waiting for a round, and time it could not run since.
  std::optional<Time> waiting_since;
  Ms away{0};
};

struct RoundPlan {
  std::set<int> started;
  size_t members = 0;
  Time closed{};
  bool complete = false;  // every member's workers succeeded
  bool broken = false;    // a member's workers ended otherwise
  int restart_count = -1;
  int world_size = -1;
  std::set<int> node_ranks;
  // A primary failure: the first worker failure that is not a peer's.
  std::optional<std::pair<int, Time>> primary;  // (agent, when its worker failed)
  Time primary_learned{};                       // when its agent learned it
  std::optional<std::pair<int, Time>> crash;    // a member killed (agent, when)
  std::set<int> succeeded;                      // members whose workers succeeded
  Time last_success{};                          // when the last of them did
  std::map<int, Time> success_at;
  Time ended = Time::max();  // when the record ended the round
};

struct Event {
  Time at;
  uint64_t seq;
  std::function<void()> fn;
  bool operator>(const Event& o) const { return std::tie(at, seq) > std::tie(o.at, o.seq); }
};

class Sim {
 public:
  Sim(uint64_t seed, bool trace) : seed_(seed), rng_(seed), trace_(trace) { Configure(); }

  // The first violation, or "" when the seed passed.
  std::string Run();
  std::string Summary() const;

 private:
  void Configure();
  void At(Time t, std::function<void()> fn) { queue_.push({t, seq_++, std::move(fn)}); }
  void Log(const std::string& m) {
    if (trace_) std::printf("  %9.3f %s\n", Seconds(now_), m.c_str());
  }
  void Fail(const std::string& what) {
    if (violation_.empty()) violation_ = what;
    Log("VIOLATION " + what);
  }
  bool Alive(int i) const { return !agents_[i].crashed && !agents_[i].exit; }
  bool Paused(int i) const { return now_ < agents_[i].paused_until; }
  // When agent i can next run: after its own pause, and after the store
  // host's (every store request waits for it).
  Time Runnable(int i) const;
  void ScheduleStep(int i, Time at);
  void WakeAll();
  void StepAgent(int i);
  void StepCoordinator();
  void Carry(int i, const Action& a);
  void StartWorkers(int i, const RoundResult& r);
  void EndWorkers(int i, WorkersOutcome o, bool breaks_round);
  void BreakRound(int round, int except);
  void Deliver(int i);
  void Crash(int i);
  void Pause(int i, Ms how_long);
  void Starve(int i, Ms how_long);
  void Terminate(int i);
  void PlanFaults();
  void Check();
  void CheckEnd();
  // Whether agent i (or the store host) was stopped, killed or paused at
  // some time in [from, to].
  bool Hindered(int i, Time from, Time to) const;
  // Whether agent i (or the store host) was silent for longer than the
  // keep-alive limit at some time after `from`.
  bool SilentPastLimit(int i, Time from) const;
  JobRecord Record();

  uint64_t seed_;
  Rng rng_;
  bool trace_;
  LocalStore store_;
  std::optional<LocalStore::Handle> observer_;
  RendezvousSettings rdzv_;
  int max_restarts_ = 0;
  Ms peer_settle_{2000};  // keep_alive_interval x (max_attempt + 1), as the launcher sets it
  Ms train_{3000};
  std::vector<SimAgent> agents_;
  std::optional<CoordinatorMachine> coordinator_;
  uint64_t coordinator_token_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  uint64_t seq_ = 0;
  Time now_ = kOrigin;
  std::map<int, RoundPlan> rounds_;
  std::set<int> failed_rounds_;
  std::set<std::pair<int, std::string>> lost_checked_;  // (round, agent) declared lost
  std::optional<JobRecord> final_;
  int64_t seen_version_ = 0;
  bool store_down_ = false;
  int fail_percent_ = 0;
  std::string violation_;
  int steps_ = 0;
};

void Sim::Configure() {
  observer_.emplace(store_.Connect());
  const int n = static_cast<int>(rng_.In(2, 4));
  rdzv_.run_id = "sim";
  rdzv_.min_nodes = static_cast<int>(rng_.In(1, n));
  rdzv_.max_nodes = static_cast<int>(rng_.In(std::max(rdzv_.min_nodes, 2), 4));
  rdzv_.join_timeout = Ms(20000);
  rdzv_.last_call_timeout = Ms(1000);
  rdzv_.keep_alive_interval = Ms(500);
  rdzv_.keep_alive_max_attempt = 3;
  max_restarts_ = static_cast<int>(rng_.In(0, 3));
  train_ = rng_.Delay(1000, 5000);
  fail_percent_ = static_cast<int>(rng_.In(0, 40));
  for (int i = 0; i < n; ++i) {
    SimAgent a;
    a.id = "agent" + std::to_string(i);
    AgentSettings s;
    s.rdzv = rdzv_;
    s.self.agent_id = a.id;
    s.self.name = "host" + std::to_string(i);
    s.self.addr = "127.0.0." + std::to_string(i + 1);
    s.self.nproc = 2;
    s.self.worker_store_port = 30000 + i;
    s.max_restarts = max_restarts_;
    s.hosts_store = i == 0;
    s.peer_settle = peer_settle_;
    a.machine.emplace(s);
    a.kv.emplace(store_.Connect());
    // Most start together; some join late (an elastic scale-up).
    a.start = kOrigin + (rng_.Chance(25) && i > 0 ? rng_.Delay(2000, 15000) : rng_.Delay(0, 300));
    agents_.push_back(std::move(a));
  }
  agents_[0].start = kOrigin;
  coordinator_.emplace(rdzv_, agents_[0].id, [this](const std::string& m) { Log("coord: " + m); });
}

std::string Sim::Summary() const {
  std::string s = "seed " + std::to_string(seed_) + ": " + std::to_string(agents_.size()) +
                  " agents, --nnodes=" + std::to_string(rdzv_.min_nodes) + ":" +
                  std::to_string(rdzv_.max_nodes) +
                  " --max_restarts=" + std::to_string(max_restarts_);
  if (final_) s += ", outcome exit " + std::to_string(final_->exit_code());
  return s + ", " + std::to_string(rounds_.size()) + " rounds, " + std::to_string(steps_) +
         " steps";
}

Time Sim::Runnable(int i) const {
  Time t = std::max({now_, agents_[i].paused_until, agents_[i].starved_until});
  return std::max(t, agents_[0].crashed ? t : agents_[0].paused_until);
}

JobRecord Sim::Record() {
  auto rec = ReadRecord(*observer_, RendezvousKeys(rdzv_.run_id));
  if (!rec.ok()) {
    Fail("record unreadable: " + rec.status().message());
    return JobRecord();
  }
  return *rec;
}

void Sim::ScheduleStep(int i, Time at) {
  const uint64_t token = ++agents_[i].token;
  At(at, [this, i, token] {
    if (agents_[i].token != token || !Alive(i)) return;
    // After a pause, who runs first is a race.
    if (Runnable(i) > now_) return ScheduleStep(i, Runnable(i) + rng_.Delay(0, 60));
    StepAgent(i);
  });
}

// A record change wakes every waiting party at once (the store WAIT on the
// next version), after a delay each.
void Sim::WakeAll() {
  for (int i = 0; i < static_cast<int>(agents_.size()); ++i) {
    if (Alive(i) && now_ >= agents_[i].start) ScheduleStep(i, now_ + rng_.Delay(0, 30));
  }
  const uint64_t token = ++coordinator_token_;
  At(now_ + rng_.Delay(0, 30), [this, token] {
    if (token == coordinator_token_) StepCoordinator();
  });
}

void Sim::StepCoordinator() {
  if (agents_[0].crashed || !coordinator_) return;
  if (Paused(0)) {
    const uint64_t token = ++coordinator_token_;
    At(agents_[0].paused_until + rng_.Delay(0, 60), [this, token] {
      if (token == coordinator_token_) StepCoordinator();
    });
    return;
  }
  ++steps_;
  auto go_on = coordinator_->Step(*agents_[0].kv, now_);
  Check();
  if (!go_on.ok() || !*go_on) {
    coordinator_.reset();
    return;
  }
  const uint64_t token = ++coordinator_token_;
  At(coordinator_->next_wake() + rng_.Delay(0, 20), [this, token] {
    if (token == coordinator_token_) StepCoordinator();
  });
}

void Sim::StepAgent(int i) {
  SimAgent& a = agents_[i];
  ++steps_;
  const auto phase_before = a.machine->phase();
  const int64_t ka_before = a.beats;
  Action action = a.machine->Step(*a.kv, now_);
  auto ka = store_down_ ? StatusOr<std::optional<std::string>>(std::nullopt)
                        : observer_->TryGet(RendezvousKeys(rdzv_.run_id).KeepAlive(a.id));
  if (ka.ok() && *ka && std::stoll(**ka) != ka_before) {
    a.beats = std::stoll(**ka);
    a.last_beat = now_;
  }
  // (f): a rendezvous wait, less the time the agent could not run.
  using P = AgentMachine::Phase;
  const auto phase = a.machine->phase();
  const bool waiting = phase == P::kJoin || phase == P::kWaitRound;
  const bool was_waiting = phase_before == P::kJoin || phase_before == P::kWaitRound;
  if (waiting && !was_waiting) {
    a.waiting_since = now_;
    a.away = Ms(0);
  }
  if (was_waiting && a.waiting_since && !store_down_) {
    auto waited = std::chrono::duration_cast<Ms>(now_ - *a.waiting_since) - a.away;
    if (waited > rdzv_.join_timeout + kWaitSlack) {
      Fail("(f) " + a.id + " waited " + std::to_string(waited.count()) + " ms for a round");
    }
  }
  if (!waiting) a.waiting_since.reset();
  Carry(i, action);
  Check();
}

void Sim::Carry(int i, const Action& a) {
  SimAgent& agent = agents_[i];
  switch (a.kind) {
    case ActionKind::kWait:
      return ScheduleStep(i, agent.machine->next_wake() + rng_.Delay(0, 20));
    case ActionKind::kClearWorkerStore:
      agent.machine->WorkerStoreCleared();
      return ScheduleStep(i, now_ + rng_.Delay(0, 5));
    case ActionKind::kStartWorkers:
      StartWorkers(i, a.round);
      return ScheduleStep(i, now_ + rng_.Delay(0, 20));
    case ActionKind::kStopWorkers:
      Log(agent.id + " stops its workers: " + a.message);
      At(now_ + rng_.Delay(0, 50), [this, i, round = agent.workers.round] {
        if (agents_[i].workers.round != round) return;  // those are long gone
        WorkersOutcome o;
        o.kind = WorkersOutcome::Kind::kStopped;
        EndWorkers(i, o, true);
      });
      return ScheduleStep(i, agent.machine->next_wake());
    case ActionKind::kExit:
      if (agent.workers.running) {
        // As the driver: the workers are stopped before the agent leaves.
        WorkersOutcome o;
        o.kind = WorkersOutcome::Kind::kStopped;
        EndWorkers(i, o, true);
      }
      agent.exit = a;
      agent.exit_time = now_;
      Log(agent.id + " exits " + std::to_string(a.exit_code) + " " + a.message);
      return;
  }
}

void Sim::StartWorkers(int i, const RoundResult& r) {
  SimAgent& a = agents_[i];
  if (final_ && final_->outcome == JobOutcome::kSucceeded) {
    Fail("(b) " + a.id + " starts workers after the job succeeded");
  }
  // A round whose workers all succeeded before anything ended it is over:
  // a later round would train again. (Unless a member's agent then stayed
  // silent past the keep-alive limit: it was lost, as documented.)
  for (const auto& [round, plan] : rounds_) {
    bool lost = false;
    for (const auto& [who, when] : plan.success_at) lost |= SilentPastLimit(who, when);
    if (plan.members > 0 && plan.succeeded.size() == plan.members && !lost &&
        plan.last_success < plan.ended) {
      Fail("(b) " + a.id + " starts workers of round " + std::to_string(r.round) +
           " though every worker of round " + std::to_string(round) + " succeeded");
    }
  }
  RoundPlan& plan = rounds_[r.round];
  // (a): every worker of a round sees the same world and restart count.
  if (plan.restart_count < 0) {
    plan.restart_count = r.restart_count;
    plan.world_size = r.world_size;
    plan.members = r.nodes.size();
  }
  if (plan.restart_count != r.restart_count || plan.world_size != r.world_size ||
      !plan.node_ranks.insert(r.node_rank).second) {
    Fail("(a) round " + std::to_string(r.round) + ": " + a.id + " starts with restart count " +
         std::to_string(r.restart_count) + ", world size " + std::to_string(r.world_size) +
         ", node rank " + std::to_string(r.node_rank) + "; others with " +
         std::to_string(plan.restart_count) + ", " + std::to_string(plan.world_size));
  }
  Log(a.id + " starts workers of round " + std::to_string(r.round) + " (node rank " +
      std::to_string(r.node_rank) + ", restart count " + std::to_string(r.restart_count) + ")");
  a.workers = Workers{true, r.round, std::nullopt};
  plan.started.insert(i);
  if (plan.started.size() < plan.members) return;
  // Everyone is in: the workers train together, unless one fails first.
  const int round = r.round;
  if (rng_.Chance(fail_percent_)) {
    std::vector<int> in(plan.started.begin(), plan.started.end());
    const int victim = in[rng_.In(0, static_cast<int64_t>(in.size()) - 1)];
    At(now_ + rng_.Delay(0, train_.count()), [this, victim, round] {
      if (!agents_[victim].workers.running || agents_[victim].workers.round != round) return;
      WorkersOutcome o;
      o.kind = WorkersOutcome::Kind::kFailed;
      o.cause.cls = rng_.Chance(20) ? FailureClass::kHang : FailureClass::kWorker;
      o.cause.exit_code =
          o.cause.cls == FailureClass::kHang ? 124 : static_cast<int>(rng_.In(1, 9));
      o.cause.rank = 2 * victim;
      o.cause.local_rank = 0;
      o.cause.pid = 1000 * (round + 1) + victim;
      o.cause.what = "rank " + std::to_string(o.cause.rank) + " exit code " +
                     std::to_string(o.cause.exit_code);
      EndWorkers(victim, o, true);
    });
  }
  At(now_ + train_, [this, round] {
    RoundPlan& p = rounds_[round];
    if (p.broken) return;
    p.complete = true;
    for (int j : p.started) {
      if (!agents_[j].workers.running || agents_[j].workers.round != round) continue;
      At(now_ + rng_.Delay(0, 50), [this, j, round] {
        if (!agents_[j].workers.running || agents_[j].workers.round != round) return;
        WorkersOutcome o;
        o.kind = WorkersOutcome::Kind::kSucceeded;
        EndWorkers(j, o, false);
      });
    }
  });
}

// The workers of agent i end with `o`; their peers on other nodes notice.
void Sim::EndWorkers(int i, WorkersOutcome o, bool breaks_round) {
  SimAgent& a = agents_[i];
  if (!a.workers.running) return;
  const int round = a.workers.round;
  a.workers.running = false;
  a.workers.exited = o;
  Log(a.id + "'s workers of round " + std::to_string(round) + " end: kind " +
      std::to_string(static_cast<int>(o.kind)) + " class " + FailureClassName(o.cause.cls));
  RoundPlan& plan = rounds_[round];
  if (o.kind == WorkersOutcome::Kind::kSucceeded) {
    plan.succeeded.insert(i);
    plan.last_success = now_;
    plan.success_at[i] = now_;
  }
  if (o.kind == WorkersOutcome::Kind::kFailed && o.cause.cls != FailureClass::kPeer &&
      !plan.primary) {
    plan.primary = {{i, now_}};
  }
  if (breaks_round && !plan.complete) BreakRound(round, i);
  if (!a.crashed) At(now_ + rng_.Delay(0, 30), [this, i] { Deliver(i); });
}

void Sim::BreakRound(int round, int except) {
  RoundPlan& plan = rounds_[round];
  plan.broken = true;
  for (int j : plan.started) {
    if (j == except) continue;
    At(now_ + rng_.Delay(0, 100), [this, j, round] {
      if (!agents_[j].workers.running || agents_[j].workers.round != round) return;
      WorkersOutcome o;
      o.kind = WorkersOutcome::Kind::kFailed;
      o.cause.cls = FailureClass::kPeer;
      o.cause.exit_code = kSigpipeCode;
      o.cause.rank = 2 * j;
      o.cause.pid = 1000 * (round + 1) + j;
      o.cause.what = "rank " + std::to_string(2 * j) + " signal 13 (SIGPIPE)";
      EndWorkers(j, o, true);
    });
  }
}

// The agent learns that its workers exited (when it runs: a paused agent
// learns after its pause, as its event loop does).
void Sim::Deliver(int i) {
  SimAgent& a = agents_[i];
  if (!Alive(i) || !a.workers.exited) return;
  if (Runnable(i) > now_) {
    At(Runnable(i) + rng_.Delay(0, 60), [this, i] { Deliver(i); });
    return;
  }
  WorkersOutcome o = *a.workers.exited;
  a.workers.exited.reset();
  if (a.signalled && o.kind == WorkersOutcome::Kind::kStopped) {
    o.kind = WorkersOutcome::Kind::kInterrupted;
    o.signal = kSigterm;
    o.signal_name = "SIGTERM";
  }
  RoundPlan& plan = rounds_[a.workers.round];
  if (plan.primary && plan.primary->first == i) plan.primary_learned = now_;
  a.machine->WorkersExited(o, now_);
  ScheduleStep(i, now_);
}

void Sim::Crash(int i) {
  SimAgent& a = agents_[i];
  if (!Alive(i)) return;
  Log("SIGKILL " + a.id);
  a.crashed = true;
  a.crash_time = now_;
  if (a.workers.running) rounds_[a.workers.round].crash = {{i, now_}};
  // Its workers die with it (parent-death signal).
  if (a.workers.running) {
    WorkersOutcome o;
    o.kind = WorkersOutcome::Kind::kStopped;
    EndWorkers(i, o, true);
  }
  if (i == 0) {
    store_.SetDown(true);
    store_down_ = true;
    coordinator_.reset();
    WakeAll();
  }
}

void Sim::Pause(int i, Ms how_long) {
  if (!Alive(i) || Paused(i)) return;
  Log("SIGSTOP " + agents_[i].id + " for " + std::to_string(how_long.count()) + " ms");
  agents_[i].paused_until = now_ + how_long;
  agents_[i].pauses.emplace_back(now_, now_ + how_long);
  // (f) counts only the time an agent could run; a paused store host stops
  // everyone's store requests.
  for (int j = 0; j < static_cast<int>(agents_.size()); ++j) {
    if (j == i || i == 0) agents_[j].away += how_long;
  }
}

// The agent's own loop is starved; on the store host its store and its
// coordinator thread still run.
void Sim::Starve(int i, Ms how_long) {
  if (!Alive(i)) return;
  Log("starve " + agents_[i].id + " for " + std::to_string(how_long.count()) + " ms");
  agents_[i].starved_until = std::max(agents_[i].starved_until, now_ + how_long);
  agents_[i].pauses.emplace_back(now_, now_ + how_long);
  agents_[i].away += how_long;
}

void Sim::Terminate(int i) {
  SimAgent& a = agents_[i];
  if (!Alive(i) || i == 0) return;
  Log("SIGTERM " + a.id);
  a.signalled = true;
  if (a.workers.running) {
    WorkersOutcome o;
    o.kind = WorkersOutcome::Kind::kStopped;
    EndWorkers(i, o, true);
  } else {
    a.machine->Interrupted(kSigterm, "SIGTERM");
    ScheduleStep(i, Runnable(i));
  }
}

void Sim::PlanFaults() {
  const int faults = static_cast<int>(rng_.In(0, 3));
  for (int f = 0; f < faults; ++f) {
    const Time at = kOrigin + rng_.Delay(0, 25000);
    const int victim = static_cast<int>(rng_.In(0, static_cast<int64_t>(agents_.size()) - 1));
    const int kind = static_cast<int>(rng_.In(0, 99));
    if (kind < 45) {
      const Ms how_long = rng_.Delay(500, 6000);
      At(at, [this, victim, how_long] { Pause(victim, how_long); });
    } else if (kind < 60) {
      const Ms how_long = rng_.Delay(500, 4000);
      At(at, [this, victim, how_long] { Starve(victim, how_long); });
    } else if (kind < 80) {
      At(at, [this, victim] { Crash(victim); });
    } else {
      At(at, [this, victim] { Terminate(victim); });
    }
  }
}

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
  // (e): restarts are used by failures only.
  if (rec.restarts != static_cast<int>(failed_rounds_.size())) {
    Fail("(e) restarts " + std::to_string(rec.restarts) + " but " +
         std::to_string(failed_rounds_.size()) + " round(s) ended by a failure");
  }
  // (c): nobody is declared lost unless it was silent that long by its own
  // doing (paused, killed, gone), never because the store host was paused.
  std::vector<std::string> lost_now;
  if (rec.end == RoundEnd::kMembership && !rec.lost_agent.empty() &&
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
    for (const auto& [start, end] : x.pauses) {
      silent |= start <= now_ && end >= now_ - limit - rdzv_.keep_alive_interval;
    }
    if (!silent || (!x.signalled && now_ - x.last_beat < limit)) {
      Fail("(c) " + lost_agent + " declared lost " +
           std::to_string(std::chrono::duration_cast<Ms>(now_ - x.last_beat).count()) +
           " ms after its last keep-alive, though it was not paused or killed");
    }
  }
  if (rec.round >= 0 && rounds_[rec.round].closed == Time{}) rounds_[rec.round].closed = now_;
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
    if (first && (e.message != first->message)) {
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

std::string Sim::Run() {
  for (int i = 0; i < static_cast<int>(agents_.size()); ++i) {
    At(agents_[i].start, [this, i] { ScheduleStep(i, now_); });
  }
  At(kOrigin, [this] { StepCoordinator(); });
  PlanFaults();
  while (!queue_.empty() && violation_.empty()) {
    Event e = queue_.top();
    queue_.pop();
    if (e.at - kOrigin > kHorizon) break;
    now_ = e.at;
    e.fn();
    bool all_done = true;
    for (int i = 0; i < static_cast<int>(agents_.size()); ++i) all_done &= !Alive(i);
    if (all_done) break;
  }
  if (violation_.empty()) CheckEnd();
  return violation_;
}

}  // namespace
}  // namespace ddprun::rendezvous

int main(int argc, char** argv) {
  uint64_t first = 1, seeds = 1000;
  std::optional<uint64_t> one;
  bool trace = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> uint64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "elastic_sim: %s needs a number\n", arg.c_str());
        std::exit(2);
      }
      return std::strtoull(argv[++i], nullptr, 10);
    };
    if (arg == "--seeds") {
      seeds = next();
    } else if (arg == "--first") {
      first = next();
    } else if (arg == "--seed") {
      one = next();
    } else if (arg == "--trace") {
      trace = true;
    } else {
      std::fprintf(stderr, "usage: elastic_sim [--seeds K] [--first S] [--seed N] [--trace]\n");
      return 2;
    }
  }
  if (one) {
    first = *one;
    seeds = 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t failed = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    ddprun::rendezvous::Sim sim(seed, trace);
    std::string violation = sim.Run();
    if (trace || !violation.empty()) std::printf("%s\n", sim.Summary().c_str());
    if (!violation.empty()) {
      ++failed;
      std::printf("FAILED seed %llu: %s (rerun: elastic_sim --seed %llu --trace)\n",
                  static_cast<unsigned long long>(seed), violation.c_str(),
                  static_cast<unsigned long long>(seed));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("# elastic_sim: seeds %llu..%llu in %.2f s (%.0f seeds/s)\n",
              static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(first + seeds - 1), secs, seeds / secs);
  std::printf("%llu passed, %llu failed\n", static_cast<unsigned long long>(seeds - failed),
              static_cast<unsigned long long>(failed));
  return failed == 0 ? 0 : 1;
}
