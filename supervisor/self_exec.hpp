// How the launcher starts itself again (its job guardian is ddprun
// re-executed), and how that copy sheds the command line it was started with.
#pragma once

#include <cstdint>
#include <functional>
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
// The loader's options, from a /proc/self/cmdline text: the arguments after
// argv[0] and before the first that `is_program` accepts (`found` false when
// none does).
struct LoaderArgs {
  bool found = false;
  std::vector<std::string> options;
};
LoaderArgs LoaderOptions(std::string_view cmdline,
                         const std::function<bool(const std::string&)>& is_program);

// Rewrites this process's command line (/proc/self/cmdline, what ps and
// pkill -f read) to `args`, in place; false when they do not fit in the
// original's space or it cannot be found.
bool RewriteCommandLine(const std::vector<std::string>& args);

}  // namespace ddprun::supervisor
