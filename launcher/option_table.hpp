// The one table of ddprun's options: torchrun's, in both spellings, plus
// ddprun's own. --help, the command-line parser and the man page test all
// read it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.hpp"

namespace ddprun::launcher {

struct OptionDef {
  const char* name;          // canonical form, underscores: "nproc_per_node"
  char short_name;           // 'm', 'r', 't', 'h' or 0
  const char* value_name;    // nullptr for a flag; its words: ValueWords; DIR: a directory
  const char* default_text;  // shown in --help; nullptr for none
  bool pet_fallback;         // read PET_<NAME> when not given
  const char* help;
};

const std::vector<OptionDef>& OptionTable();

// The words an option's value may be: the alternatives of its value_name
// ("heartbeat|output|torch", "N|cpu|gpu|auto") without an upper-case letter;
// N, R:V,... and the like are placeholders. The parsers accept these words,
// --help shows them, shell completion offers them. Empty for a flag.
std::vector<std::string_view> ValueWords(const OptionDef& def);

// Whether `name` (canonical) is one of torchrun's own options.
bool IsTorchrunOption(std::string_view name);

// Finds the option a long name refers to: exact, with '-' or '_', or (as
// argparse allows) a prefix that is unique, or unique among torchrun's
// options (--t is --tee, as under torchrun). `name` has no leading dashes.
// The error names the option and the closest valid spelling.
StatusOr<const OptionDef*> FindLongOption(const std::string& name);
const OptionDef* FindShortOption(char c);

// The command line read once, by the table: the launcher's own arguments,
// then the program and its arguments, untouched. Every spelling torchrun
// accepts is read: --name=V, --name V, -tV, -t V, -t=V, dashes or
// underscores, unique prefixes. A flag given on the command line has the
// value "1"; an option given twice keeps the last value (as argparse), and
// that it replaced another is told (RepeatedOptionWarning).
struct SplitArgs {
  std::vector<std::string> launcher;          // each "--<canonical>[=value]", in order
  std::map<std::string, std::string> values;  // canonical name -> value
  // Options given again with another value: name, the value replaced.
  std::vector<std::pair<std::string, std::string>> replaced;
  std::optional<std::string> program;
  std::vector<std::string> program_args;
};
StatusOr<SplitArgs> SplitCommandLine(const std::vector<std::string>& args);
// What to say of an option given twice whose last value replaced `first`;
// nothing when both mean the same (30 and 30.0, --rdzv_conf keys reordered).
std::optional<std::string> RepeatedOptionWarning(const std::string& name, const std::string& first,
                                                 const std::string& last);

// Levenshtein distance, for "did you mean".
size_t EditDistance(const std::string& a, const std::string& b);

// The --help text, built from the table.
std::string HelpText();

}  // namespace ddprun::launcher
