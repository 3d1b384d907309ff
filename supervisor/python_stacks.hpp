// The Python stacks a rank's dump adds beside its own (supervisor/debug_dump.hpp):
// the processes of the worker where the cause may be.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace ddprun::supervisor {

// The Python stacks of `pid`'s child processes (DataLoader workers, a
// subprocess): they may hold the cause. "" when it has none.
std::string ChildStacks(const std::string& py_spy, pid_t pid, std::chrono::milliseconds timeout);

// When the rank's Python (`python`, the process that claimed the rank) is not
// the worker itself (`worker`): the Python stacks of the worker and of its
// other processes, those outside `python`'s tree. A worker that ran
// torch.multiprocessing.spawn has several Pythons, one of them claims the
// rank, and the one that hangs may be another (attack 83). Processes py-spy
// cannot read as Python (a wrapper shell) are left out; at most
// kMaxOtherProcesses are looked at. "" when none is Python.
inline constexpr int kMaxOtherProcesses = 16;
std::string OtherStacks(const std::string& py_spy, pid_t worker, pid_t python,
                        std::chrono::milliseconds timeout);

}  // namespace ddprun::supervisor
