#include "base/pause_clock.hpp"

namespace ddprun {

PauseLook PauseClock::Look(Time now, bool worker_stopped) {
  const auto elapsed = now > last_ ? now - last_ : Time::duration{0};
  const bool was_stopped = stopped_;
  last_ = now;
  stopped_ = worker_stopped;
  if (elapsed >= kTick + kLate) return {elapsed, true};
  if (was_stopped || worker_stopped) return {elapsed, false};
  return {};
}

}  // namespace ddprun
