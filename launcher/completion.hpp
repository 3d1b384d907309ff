// Shell completion for ddprun, made from the option table
// (launcher/option_table.hpp), so that it offers what --help lists:
// `ddprun --print-completion bash|zsh` prints the script.
//
// Both scripts offer every long option in both spellings (--nproc_per_node,
// --nproc-per-node) and the short ones; after an option, the words its value
// may be (ValueWords) as --opt VALUE and --opt=VALUE, or directories for a
// DIR; at the first word the subcommands doctor and dump; then the program
// (directories, executables, .py files). After the program every word is the
// program's: files, no ddprun option. The bash script needs only bash's
// builtins (complete, compgen), not the bash-completion package.
#pragma once

#include <string>

namespace ddprun::launcher {

enum class Shell { kBash, kZsh };

// The whole script, ready to print or save; never fails.
std::string CompletionScript(Shell shell);

}  // namespace ddprun::launcher
