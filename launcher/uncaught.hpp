// The launcher's last word on an exception nothing caught.
//
// Library code returns Status; what can still escape is the standard
// library's own: std::bad_alloc (out of memory, e.g. under ulimit -v) and
// std::system_error (a thread that could not be started). On any thread, the
// installed handler writes "ddprun: out of memory: ..." or "ddprun: <what>"
// to stderr and ends the process with exit code 1, never by abort (SIGABRT,
// a core). Workers die with the launcher (PR_SET_PDEATHSIG, the guardian).
#pragma once

namespace ddprun::launcher {

// Installs the handler (std::set_terminate); call first thing in main.
void InstallUncaughtHandler();

}  // namespace ddprun::launcher
