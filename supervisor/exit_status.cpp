#include "supervisor/exit_status.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <csignal>
#include <utility>

namespace ddprun::supervisor {

namespace {

constexpr std::array<std::pair<int, const char*>, 31> kSignals = {{
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
    {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
    {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
}};

}  // namespace

ExitStatus ExitStatus::FromWaitStatus(int wstatus) {
  if (!WIFSIGNALED(wstatus)) return Exited(WEXITSTATUS(wstatus));
  ExitStatus e = Signaled(WTERMSIG(wstatus));
  e.core_dumped = WCOREDUMP(wstatus);
  return e;
}

ExitStatus ExitStatus::FromSiginfo(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return Exited(info.si_status);
  ExitStatus e = Signaled(info.si_status);
  e.core_dumped = info.si_code == CLD_DUMPED;
  return e;
}

std::string ExitStatus::Describe() const {
  if (signal != 0) return "signal " + std::to_string(signal) + " (" + SignalName(signal) + ")";
  return "exit code " + std::to_string(code);
}

bool ExitStatus::Crashed() const {
  return signal == SIGSEGV || signal == SIGBUS || signal == SIGILL || signal == SIGFPE ||
         signal == SIGABRT || signal == SIGSYS || signal == SIGTRAP;
}

std::string SignalName(int sig) {
  for (const auto& [num, name] : kSignals) {
    if (num == sig) return name;
  }
  return "SIG" + std::to_string(sig);
}

int SignalNumber(const std::string& name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper.rfind("SIG", 0) != 0) upper = "SIG" + upper;
  for (const auto& [num, sig_name] : kSignals) {
    if (upper == sig_name) return num;
  }
  return 0;
}

}  // namespace ddprun::supervisor
