// Why this process could not start a thread (pthread_create's, std::thread's
// EAGAIN), from the limits that decide it: the user's RLIMIT_NPROC (every
// thread of the user counts), or RLIMIT_AS with each thread's stack
// (RLIMIT_STACK's soft limit, glibc's default size). Read when it happens.
#pragma once

#include <string>

namespace ddprun {

// " (a thread could not be started: ...: <fix>)", with the numbers read now.
std::string WhyNoThread();

}  // namespace ddprun
