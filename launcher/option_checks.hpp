// Options that are each valid but do not work together: refused when the
// combination cannot do what it says (a usage error), told when one of them
// does nothing in it. Nothing is silently ignored.
#pragma once

#include "base/status.hpp"
#include "env/environ.hpp"
#include "launcher/options.hpp"

namespace ddprun::launcher {

class RawOptions;

// Options ddprun accepts but that cannot change what it does: each said once
// (a notice).
void NoteIneffective(const RawOptions& raw, ParsedCommandLine& parsed);

// Checks parsed.config (every option applied) with the launcher's
// environment; adds warnings to `parsed`, also for a PET_ variable that no
// option reads (a misspelling, with the closest one).
Status CheckCombinations(const env::Environ& environ, ParsedCommandLine& parsed);
// Warnings on the program, once it is known: a Python started with an option
// that keeps --hang_detect=torch's hook from loading (-E, -I, -S).
void CheckProgram(ParsedCommandLine& parsed);

}  // namespace ddprun::launcher
