// libuv's process-wide state, made while file descriptors are there.
//
// The first uv_loop_init or uv_signal_init in a process makes a pipe that
// guards libuv's signal table, and libuv aborts the process when that pipe
// cannot be made (out of fds). PrepareUvGlobals makes it first, when the fds
// it needs are known to be free, so that running out later is an error, not an abort.
//
// Thread safety: call it from one thread before any loop is made (the
// supervisor does, first thing). Calls after a success do nothing.
#pragma once

#include "base/status.hpp"

namespace ddprun::supervisor {

// Fails ("...: Too many open files") when four fds are not free; libuv is left
// untouched then, and the call may be repeated.
Status PrepareUvGlobals();

}  // namespace ddprun::supervisor
