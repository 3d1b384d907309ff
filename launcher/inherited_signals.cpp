#include "launcher/inherited_signals.hpp"

#include <csignal>

#include "supervisor/exit_status.hpp"

namespace ddprun::launcher {

namespace {

// Why a shell leaves a signal ignored for a program, for the notice.
std::string Why(int sig) {
  if (sig == SIGHUP) return "nohup, or a parent that ignores hangups";
  if (sig == SIGINT || sig == SIGQUIT) return "a background job of a shell script";
  return "ignored by the parent";
}

}  // namespace

std::vector<std::string> KeepSignalsIgnored(const std::set<int>& ignored_at_start,
                                            LaunchConfig& c) {
  std::vector<std::string> notices;
  if (!c.signals_given) {
    std::string kept;
    for (int sig : std::set<int>(c.handled_signals)) {
      if (ignored_at_start.count(sig) == 0) {
        kept += (kept.empty() ? "" : ",") + supervisor::SignalName(sig);
        continue;
      }
      c.handled_signals.erase(sig);
      const std::string name = supervisor::SignalName(sig);
      notices.push_back(name + " was ignored when ddprun started (" + Why(sig) +
                        "): it stays ignored, for ddprun and the workers; "
                        "--signals_to_handle=" +
                        name + " handles it anyway");
    }
    if (!notices.empty()) c.signals_to_handle = kept;
  }
  c.workers_ignore.clear();
  for (int sig : ignored_at_start) {
    if (c.handled_signals.count(sig) == 0 && sig != SIGPIPE && sig != SIGXFSZ) {
      c.workers_ignore.insert(sig);
    }
  }
  return notices;
}

}  // namespace ddprun::launcher
