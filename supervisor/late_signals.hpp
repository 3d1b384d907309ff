// Signals around the supervisor's own handlers: kept caught while libuv
// would reset them, and, once the launcher is exiting, a terminating signal
// ends it with 128+N (never a core dump) while SIGUSR1/2 are dropped.
#pragma once

#include <set>

namespace ddprun::supervisor {

// The signals this process ignores now (SIG_IGN); read at start, before any
// handler is installed, it is what the launcher inherited: `nohup` ignores
// SIGHUP, a script's background job SIGINT and SIGQUIT.
std::set<int> IgnoredSignals();

// Keeps `sig` caught by a libuv handle on a loop that never runs (libuv
// restores the default disposition when a signal's last handle closes).
// Returns 0 or a libuv error (out of fds).
int KeepCaught(int sig);

// Counts each delivery of `sig` in the handler itself, then passes it on to
// the handler installed now (libuv's): code that holds the loop a while (a
// debug dump's stack tools) can tell it was told to stop before the loop
// reads the signal. Installed once per signal (KeepCaught keeps libuv's
// handler in place).
void CountDeliveries(int sig);
// The deliveries counted so far, of every signal given to CountDeliveries.
unsigned CountedDeliveries();

// From now on `sig` is ignored, or ends the process with 128+N.
void CatchLate(int sig, bool ignore);

}  // namespace ddprun::supervisor
