// The stacks of a rank's dump (supervisor/debug_dump.hpp): finding py-spy, the
// Python stacks of the worker's other processes where the cause may be, and
// the parts of the stacks its summary shows.
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

// py-spy: on PATH, else beside the Python that `python` runs (argv[0] of
// /proc/<python>/cmdline: a virtual environment's bin, used without being
// activated, as PYTHON_EXEC or a script's shebang names it); "" when neither.
std::string FindPySpy(pid_t python);

// The main thread's frames in a `py-spy dump` ("Thread <tid> (<state>):
// "MainThread""), under "python Thread <tid> (<state>):"; "" when py-spy
// printed none.
std::string MainThreadPythonStack(const std::string& py_spy, size_t max_lines);

// The Python threads of a `py-spy dump` other than the main one and ddprun's
// hook ("ddprun-torch-hook"): what a program that finished waits for as it
// exits (threads that are not daemons). At most `max_threads`, `frames`
// frames each, under "python Thread <tid> "<name>":", and a line for the rest.
std::string OtherPythonThreads(const std::string& py_spy, size_t max_threads, size_t frames);

// The first `max_lines` frames of the main thread (tid == pid) in eu-stack
// ("TID <pid>:") or gdb ("(LWP <pid>)") output; "" when not found.
std::string MainThreadStack(const std::string& stacks, pid_t pid, size_t max_lines);

}  // namespace ddprun::supervisor
