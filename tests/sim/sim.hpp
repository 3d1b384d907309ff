// Deterministic simulation of elastic jobs: N agents (AgentMachine) and the
// coordinator (CoordinatorMachine) of ddprun run over one in-process store
// (the real StoreState behind LocalStore) with a fake clock and a seeded
// scheduler. The scheduler injects what the real world does to a job:
// worker failures and the peers that die of them, agent pauses (SIGSTOP,
// longer than the keep-alive limit), agent crashes (SIGKILL: its workers die
// with it), the store host paused (every store request waits) or killed (the
// store is gone), an agent killed and started again (under static, with the
// same node rank), late joiners, SIGTERM to an agent, and delays on every
// step and every report of a worker's exit.
//
// After every step it checks the invariants of docs/elastic-invariants.md
// (a..f) and at the end that every agent exited in time. A failing seed
// reproduces exactly: `elastic_sim --seed N --trace`.
//
// sim.cpp runs the world, invariants.cpp checks it, main.cpp runs seeds.
//
// Not thread-safe: one Sim per thread.
#pragma once

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

namespace ddprun::rendezvous::sim {

using Time = Clock::time_point;
using Ms = std::chrono::milliseconds;

inline constexpr int kSigterm = 15;
inline constexpr int kSigpipeCode = 128 + 13;
inline const Time kOrigin = Time(std::chrono::hours(1));
inline constexpr Ms kHorizon{400000};  // every agent must have exited by then
inline constexpr Ms kWaitSlack{1000};  // (f): poll interval and step delays

inline double Seconds(Time t) { return std::chrono::duration<double>(t - kOrigin).count(); }

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
  int requested_rank = -1;  // static: its --node_rank
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
  bool done_recorded = false;  // the record said a member's workers finished
  Time ended = Time::max();    // when the record ended the round
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
  void EndWorkers(int i, const WorkersOutcome& o, bool breaks_round);
  void BreakRound(int round, int except);
  void Deliver(int i);
  // The agent hears that a worker of its failed as the others begin their
  // grace (AgentMachine::FailedEarly), when it runs.
  void DeliverEarly(int i, int round, const WorkersOutcome& o);
  void Crash(int i);
  void Replace(int i, Ms after);
  // A new agent (its index), asking for `requested_rank`, started at `start`.
  int AddAgent(int requested_rank, Time start);
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
  bool static_ = false;
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

}  // namespace ddprun::rendezvous::sim
