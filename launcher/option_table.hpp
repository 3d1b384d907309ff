// The one table of ddprun's options: torchrun's, in both spellings, plus
// ddprun's own. --help, the argv scanner and the man page test all read it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"

namespace ddprun::launcher {

struct OptionDef {
  const char* name;          // canonical form, underscores: "nproc_per_node"
  char short_name;           // 'm', 'r', 't', 'h' or 0
  const char* value_name;    // nullptr for a flag
  const char* default_text;  // shown in --help; nullptr for none
  bool pet_fallback;         // read PET_<NAME> when not given
  const char* help;
};

const std::vector<OptionDef>& OptionTable();

// Finds the option a long name refers to: exact, with '-' or '_', or (as
// argparse allows) a prefix that is unique. `name` has no leading dashes.
// The error names the option and the closest valid spelling.
StatusOr<const OptionDef*> FindLongOption(const std::string& name);
const OptionDef* FindShortOption(char c);

// The launcher's own arguments, each rewritten as "--<canonical>[=value]",
// then the program and its arguments, untouched.
struct SplitArgs {
  std::vector<std::string> launcher;
  std::optional<std::string> program;
  std::vector<std::string> program_args;
};
StatusOr<SplitArgs> SplitCommandLine(const std::vector<std::string>& args);

// Levenshtein distance, for "did you mean".
size_t EditDistance(const std::string& a, const std::string& b);

// The --help text, built from the table.
std::string HelpText();

}  // namespace ddprun::launcher
