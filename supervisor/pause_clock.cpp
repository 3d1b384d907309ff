#include "supervisor/pause_clock.hpp"

namespace ddprun::supervisor {

PauseLook PauseClock::Look(SteadyTime now, bool worker_stopped) {
  const auto elapsed = now > last_ ? now - last_ : SteadyTime::duration{0};
  const bool was_stopped = stopped_;
  last_ = now;
  stopped_ = worker_stopped;
  if (elapsed >= kTick + kLate) return {elapsed, true};
  if (was_stopped || worker_stopped) return {elapsed, false};
  return {};
}

}  // namespace ddprun::supervisor
