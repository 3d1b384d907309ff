// How the launcher starts itself again (its job guardian is ddprun
// re-executed), and how that copy sheds the command line it was started with.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::supervisor {

// What to execute: normally /proc/self/exe, with no arguments before the
// program's own. Run through its dynamic loader (`ld.so ./ddprun`, a way
// round a noexec mount), /proc/self/exe is the loader: then the loader again,
// with the options it was given (--library-path ...) and this program's file.
struct SelfExec {
  std::string path = "/proc/self/exe";
  std::vector<std::string> before;  // go between argv[0] and the program's own arguments
};
SelfExec FindSelfExec();

// The file mapped at `address` in a /proc/<pid>/maps text; "" when none.
std::string MappedFile(std::string_view maps, uintptr_t address);
// The loader's options, from a /proc/self/cmdline text whose last
// `program_args` arguments are the program's argv (its path first): those
// between the loader's argv[0] and the program (`found` false when the text
// holds no more than the program's own).
struct LoaderArgs {
  bool found = false;
  std::vector<std::string> options;
  std::string program;  // as the command line names it
};
LoaderArgs LoaderOptions(std::string_view cmdline, int program_args);

// main() says how many arguments it got (argc), before FindSelfExec().
void RememberArgumentCount(int argc);

// Rewrites this process's command line (/proc/self/cmdline, what ps and
// pkill -f read) to `args`, in place; false when they do not fit in the
// original's space or it cannot be found.
bool RewriteCommandLine(const std::vector<std::string>& args);

}  // namespace ddprun::supervisor
