// An agent whose rendezvous store is gone (its host stopped, killed or
// unreachable) or did not answer: how that is told, how long this node's
// workers may go on, and what decides the agent's exit. Part of AgentMachine
// (agent_machine.hpp).
#include "rendezvous/agent_machine.hpp"

#include <algorithm>

#include "base/exit_codes.hpp"

namespace ddprun::rendezvous {

Action AgentMachine::StepTook(std::chrono::milliseconds took, std::chrono::milliseconds waited,
                              Action action) {
  if (!gone_in_step_ || away_.count() > 0 || silent_.count() > 0 ||
      took <= s_.rdzv.keep_alive_interval) {
    return action;
  }
  const auto self = took - std::min(took, waited);
  if (self > s_.rdzv.keep_alive_interval) {
    away_ = self;
  } else {
    silent_ = took;
  }
  phase_ = *gone_in_step_;  // kDone, if it exited: the same decision, told with the above
  return StoreGone(*gone_);
}

Action AgentMachine::StoreGone(const Status& s) {
  gone_ = s;
  gone_in_step_ = phase_;
  std::string message = s.Annotate("rendezvous").message();
  if (s.code() == StatusCode::kDeadlineExceeded) {
    // The store took that long, not this agent: the gap between its steps
    // was the wait for the reply.
    message +=
        ": the agent hosting it is stopped, starved or hung, or the network failed "
        "(read_timeout in --rdzv_conf bounds the wait)";
  } else if (away_ >= s_.rdzv.KeepAliveLimit()) {
    // The others, if they ran, took this node for lost meanwhile.
    message += "; this agent did not run for " + DurationText(away_) +
               " (stopped or starved), past the keep-alive limit (" +
               DurationText(s_.rdzv.KeepAliveLimit()) +
               "): the other agents will have taken this node for lost, and the job went on or "
               "ended without it: its outcome is in the other agents' logs";
  } else if (away_.count() > 0) {
    // The likely story: the job went on without this node and is over.
    message += "; this agent did not run for " + DurationText(away_) +
               " (stopped or starved) and may have been dropped from the job, which then "
               "ended: its outcome is in the other agents' logs";
  } else if (silent_.count() > 0) {
    message += "; it had not answered this agent's request for " + DurationText(silent_) +
               " (its host stopped or starved) before it went";
  }
  if (phase_ == Phase::kRunning || phase_ == Phase::kStopping || phase_ == Phase::kStoreGone) {
    // Workers of this node run, or have just exited unseen: they may end by
    // themselves (a job at its end, its host gone with it, finishes on every
    // node alike), else they are stopped (AfterStoreGone); what they did
    // decides this agent's exit.
    if (phase_ == Phase::kStopping) stop_asked_ = true;  // the round had ended
    phase_ = Phase::kStoreGone;
    gone_message_ = message;
    // Stepped again at once: the grace counts from then (AfterStoreGone), not
    // from the start of this step, whose request may have waited read_timeout.
    if (last_step_) next_wake_ = *last_step_;
    Action note;  // kWait
    note.message = message;
    if (!stop_asked_) {
      note.message += "; this node's workers may go on for up to " +
                      DurationText(s_.store_gone_grace) +
                      " to end by themselves, then they are stopped";
    }
    return note;
  }
  if ((phase_ == Phase::kExited || phase_ == Phase::kFinishing) &&
      outcome_.kind == WorkersOutcome::Kind::kSucceeded) {
    gone_message_ = message;
    return ExitWorkersSucceeded();
  }
  // The job's end was read before the store went (AfterStoreGone's case too).
  if (phase_ == Phase::kExited && final_seen_ &&
      outcome_.kind != WorkersOutcome::Kind::kInterrupted) {
    return ExitByRecord(*final_seen_);
  }
  Exit(1, message);
  done_.store_lost = true;
  return done_;
}

Action AgentMachine::ExitWorkersSucceeded() {
  // As torchrun's agent, whose workers succeeded: the store is only how it
  // would have heard of the others.
  return Exit(0, gone_message_ +
                     "; this node's workers had all exited 0 by then: the job's outcome is in "
                     "the other agents' logs");
}

Action AgentMachine::AfterStoreGone(Time now) {
  using Kind = WorkersOutcome::Kind;
  if (!outcome_known_) {
    // No keep-alive to send: the store is gone. The workers' own end is
    // waited for until the grace is over.
    if (!stop_at_) stop_at_ = now + s_.store_gone_grace;
    if (!stop_asked_ && now >= *stop_at_) {
      stop_asked_ = true;
      next_wake_ = now + s_.poll;
      Action stop;
      stop.kind = ActionKind::kStopWorkers;
      stop.message = gone_message_ + "; this node's workers did not end within " +
                     DurationText(s_.store_gone_grace) + " after it";
      return stop;
    }
    next_wake_ = stop_asked_ ? now + s_.poll : std::min(now + s_.poll, *stop_at_);
    return Action{};
  }
  if (outcome_.kind == Kind::kSucceeded) return ExitWorkersSucceeded();
  // The job had ended (by this node's failure or another's) before the store
  // went: its host left once the others had read that, or could not wait
  // longer for this node's workers to stop.
  if (final_seen_ && outcome_.kind != Kind::kInterrupted) return ExitByRecord(*final_seen_);
  if (outcome_.kind == Kind::kInterrupted) {
    Interrupted(outcome_.signal, outcome_.signal_name);
    return Exit(exit_code::ForSignal(outcome_.signal),
                "received " + signal_name_ + " after " + gone_message_);
  }
  if (outcome_.kind == Kind::kFailed && !outcome_.cause.what.empty()) {
    // Their failure follows from the store host's loss, most likely (peers
    // gone with it): that stays the cause, as every other agent says.
    Exit(1, gone_message_ + "; this node's workers failed meanwhile (" + outcome_.cause.what + ")");
    done_.store_lost = true;
    return done_;
  }
  Exit(1, gone_message_);
  done_.store_lost = true;
  return done_;
}

Action AgentMachine::Abandoned(int signal, std::string name, const std::string& store) {
  Interrupted(signal, std::move(name));
  return Exit(exit_code::ForSignal(signal),
              "received " + signal_name_ + " while the rendezvous store at " + store +
                  " did not answer (the agent hosting it is stopped, starved or hung, or the "
                  "network failed): this agent left without saying so, and the others lose it "
                  "by keep-alive");
}

}  // namespace ddprun::rendezvous
