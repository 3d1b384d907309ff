// The simulated world: agents, the coordinator, workers, faults and the
// scheduler that runs them (sim.hpp).
#include "tests/sim/sim.hpp"

namespace ddprun::rendezvous::sim {

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
  // The static backend: --nnodes=N, each node its own --node_rank.
  static_ = rng_.Chance(30);
  if (static_) {
    rdzv_.min_nodes = rdzv_.max_nodes = n;
    rdzv_.exclusive_ranks = true;
  }
  max_restarts_ = static_cast<int>(rng_.In(0, 3));
  rdzv_.max_restarts = max_restarts_;
  train_ = rng_.Delay(1000, 5000);
  fail_percent_ = static_cast<int>(rng_.In(0, 40));
  agents_.reserve(16);  // replacements join; no reference outlives an event
  for (int i = 0; i < n; ++i) {
    // Most start together; some join late (an elastic scale-up).
    AddAgent(static_ ? i : -1,
             kOrigin + (rng_.Chance(25) && i > 0 ? rng_.Delay(2000, 15000) : rng_.Delay(0, 300)));
  }
  agents_[0].start = kOrigin;
  coordinator_.emplace(rdzv_, agents_[0].id, [this](const std::string& m) { Log("coord: " + m); });
}

int Sim::AddAgent(int requested_rank, Time start) {
  const int i = static_cast<int>(agents_.size());
  SimAgent a;
  a.id = "agent" + std::to_string(i);
  AgentSettings s;
  s.rdzv = rdzv_;
  s.self.agent_id = a.id;
  s.self.name = "host" + std::to_string(i);
  s.self.addr = "127.0.0." + std::to_string(i + 1);
  s.self.nproc = 2;
  s.self.requested_rank = requested_rank;
  s.hosts_store = i == 0;
  s.peer_settle = peer_settle_;
  a.machine.emplace(s);
  a.kv.emplace(store_.Connect());
  a.start = start;
  a.requested_rank = requested_rank;
  agents_.push_back(std::move(a));
  return i;
}

std::string Sim::Summary() const {
  std::string s = "seed " + std::to_string(seed_) + ": " + std::to_string(agents_.size()) +
                  " agents, --nnodes=" + std::to_string(rdzv_.min_nodes) + ":" +
                  std::to_string(rdzv_.max_nodes) +
                  " --max_restarts=" + std::to_string(max_restarts_) + (static_ ? " (static)" : "");
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
  // The real coordinator thread would spin on a wake time in the past.
  if (coordinator_->next_wake() < now_) Fail("the coordinator asks to wake in the past: it spins");
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
      if (agent.machine->next_wake() < now_) Fail(agent.id + " asks to wake in the past: it spins");
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
    // Once a member said its workers finished, the training is known to be over: no
    // silence excuses running it again.
    bool lost = false;
    for (const auto& [who, when] : plan.success_at) lost |= SilentPastLimit(who, when);
    lost &= !plan.done_recorded;
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
      o.cause.cls = rng_.Chance(20)  ? FailureClass::kHang
                    : rng_.Chance(5) ? FailureClass::kExitHang
                    : rng_.Chance(5) ? FailureClass::kExitCrash
                                     : FailureClass::kWorker;
      o.cause.exit_code = o.cause.cls == FailureClass::kWorker ? static_cast<int>(rng_.In(1, 9))
                          : o.cause.cls == FailureClass::kExitCrash ? 134
                                                                    : 124;
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
void Sim::EndWorkers(int i, const WorkersOutcome& o, bool breaks_round) {
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
  if (a.crashed) return;
  // Half of the failures come with a long grace for the other local workers
  // (--shutdown_timeout, a worker ignoring SIGTERM): the agent records the
  // failure early and learns of the exit up to 5 s later.
  const bool early = o.kind == WorkersOutcome::Kind::kFailed &&
                     o.cause.cls != FailureClass::kPeer && !o.settle && rng_.Chance(50);
  if (early) At(now_ + rng_.Delay(0, 30), [this, i, round, o] { DeliverEarly(i, round, o); });
  At(now_ + rng_.Delay(0, early ? 5000 : 30), [this, i] { Deliver(i); });
}

void Sim::DeliverEarly(int i, int round, const WorkersOutcome& o) {
  SimAgent& a = agents_[i];
  if (!Alive(i) || !a.workers.exited || a.workers.round != round) return;
  if (Runnable(i) > now_) {
    At(Runnable(i) + rng_.Delay(0, 60), [this, i, round, o] { DeliverEarly(i, round, o); });
    return;
  }
  RoundPlan& plan = rounds_[round];
  if (plan.primary && plan.primary->first == i) plan.primary_learned = now_;
  a.machine->FailedEarly(o, now_);
  ScheduleStep(i, now_);
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
  if (plan.primary && plan.primary->first == i && plan.primary_learned == Time{}) {
    plan.primary_learned = now_;
  }
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

// SIGKILL, then the same node's agent started again (a new agent, the same
// --node_rank under static): it takes the killed one's place.
void Sim::Replace(int i, Ms after) {
  if (!Alive(i) || i == 0) return;
  Crash(i);
  At(now_ + after, [this, i] {
    const int j = AddAgent(agents_[i].requested_rank, now_);
    Log("start " + agents_[j].id + " in place of " + agents_[i].id);
    ScheduleStep(j, now_);
  });
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
    } else if (kind < 72) {
      At(at, [this, victim] { Crash(victim); });
    } else if (kind < 86) {
      const Ms after = rng_.Delay(200, 4000);
      At(at, [this, victim, after] { Replace(victim, after); });
    } else {
      At(at, [this, victim] { Terminate(victim); });
    }
  }
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

}  // namespace ddprun::rendezvous::sim
