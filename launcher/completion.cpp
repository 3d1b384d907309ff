#include "launcher/completion.hpp"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <vector>

#include "launcher/option_table.hpp"

namespace ddprun::launcher {

namespace {

struct Subcommand {
  const char* name;
  const char* help;
};

// Read as the first argument only (DoctorArguments, MaybeRequestDump).
constexpr Subcommand kSubcommands[] = {
    {"doctor", "check this host for a job and exit"},
    {"dump", "ask a running ddprun for a debug dump of its workers"},
};

// "--nproc_per_node" and "--nproc-per-node"; one where the two are the same.
std::vector<std::string> LongSpellings(const OptionDef& def) {
  std::string dashed = def.name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  std::vector<std::string> spellings = {std::string("--") + def.name};
  if (dashed != def.name) spellings.push_back("--" + dashed);
  return spellings;
}

bool TakesDirectory(const OptionDef& def) {
  return def.value_name != nullptr && std::string_view(def.value_name) == "DIR";
}

// Adds `word` to the blank-separated `list`.
void Append(std::string& list, std::string_view word) {
  if (!list.empty()) list += ' ';
  list += word;
}

std::string Joined(const std::vector<std::string_view>& words) {
  std::string out;
  for (auto word : words) Append(out, word);
  return out;
}

// ---------------------------------------------------------------------------
// bash

constexpr char kBashHeader[] =
    R"bash(# bash completion for ddprun, made by `ddprun --print-completion bash` from its
# option table. Load it with source <(ddprun --print-completion bash), e.g. in
# ~/.bashrc, or save it as ~/.local/share/bash-completion/completions/ddprun.
# It needs only bash's complete and compgen, not the bash-completion package.
)bash";

// The shell side of the options' rules (launcher/option_table.hpp): long
// names in either spelling or as a unique prefix, a value in the same word
// (--opt=V) or in the next one, and the program ending ddprun's options.
constexpr char kBashFunctions[] = R"bash(
# The canonical name of the long option typed as $1 (without its dashes):
# either spelling, or a prefix unique among all options or among torchrun's;
# nothing when there is none.
_ddprun_long() {
  local typed=${1//-/_} name found='' count=0 torchrun='' torchrun_count=0
  for name in $_ddprun_names; do
    if [[ $name == "$typed" ]]; then
      printf '%s\n' "$name"
      return
    fi
    if [[ $name == "$typed"* ]]; then
      found=$name
      count=$((count + 1))
      if [[ " $_ddprun_torchrun " == *" $name "* ]]; then
        torchrun=$name
        torchrun_count=$((torchrun_count + 1))
      fi
    fi
  done
  if ((count == 1)); then
    printf '%s\n' "$found"
  elif ((torchrun_count == 1)); then
    printf '%s\n' "$torchrun"
  fi
}

# The canonical names of the options in the word $1, one per line: a long
# one, or short ones bundled as argparse takes them (-mt3 is -m -t 3) up to
# the first that takes a value, that one with a + after it when its value is
# in the word too (--tee=3, -t3).
_ddprun_options_in() {
  local name rest
  case $1 in
    --*=*)
      rest=${1%%=*}
      name=$(_ddprun_long "${rest#--}")
      if [[ -n $name ]]; then printf '%s+\n' "$name"; fi
      ;;
    --?*)
      name=$(_ddprun_long "${1#--}")
      if [[ -n $name ]]; then printf '%s\n' "$name"; fi
      ;;
    -?*)
      rest=${1#-}
      while [[ -n $rest ]]; do
        name=$(_ddprun_short "${rest:0:1}")
        rest=${rest:1}
        if [[ -z $name ]]; then return; fi
        if [[ " $_ddprun_valued " == *" $name "* ]]; then
          if [[ -n $rest ]]; then printf '%s+\n' "$name"; else printf '%s\n' "$name"; fi
          return
        fi
        printf '%s\n' "$name"
      done
      ;;
  esac
}

# The canonical name of the option typed as $1 when its value is the next
# word (--opt V, -t V, -mt V); nothing for a flag, --opt=V or -t3.
_ddprun_takes_next() {
  local name last=''
  while IFS= read -r name; do last=$name; done < <(_ddprun_options_in "$1")
  if [[ -n $last && " $_ddprun_valued " == *" $last "* ]]; then printf '%s\n' "$last"; fi
}

# Whether the option word $1 runs the program as a module (-m, --module, -mt3).
_ddprun_asks_module() {
  local name
  while IFS= read -r name; do
    if [[ $name == module ]]; then return 0; fi
  done < <(_ddprun_options_in "$1")
  return 1
}

# COMPREPLY: what compgen gives for $2..., each after the prefix $1.
_ddprun_reply() {
  local prefix=$1
  shift
  mapfile -t COMPREPLY < <(compgen -P "$prefix" "$@")
}

# COMPREPLY: the program, starting with $1: directories, executables and .py
# files, a name without a slash also from PATH (ddprun looks there after the
# current directory), and at the first word the subcommands. With $2 (-m):
# modules of the current directory instead, dotted (pkg.mod).
_ddprun_program() {
  local file path command
  local -A seen=()
  COMPREPLY=()
  if [[ -n $2 ]]; then
    _ddprun_modules "$1"
    return
  fi
  compopt -o filenames 2>/dev/null
  if ((COMP_CWORD == 1)); then
    mapfile -t COMPREPLY < <(compgen -W "$_ddprun_subcommands" -- "$1")
  fi
  while IFS= read -r file; do
    path=$file  # compgen leaves a leading ~/ as typed
    if [[ $path == "~/"* ]]; then path=$HOME/${path#"~/"}; fi
    if [[ -d $path || -x $path || $path == *.py ]]; then
      COMPREPLY+=("$file")
      seen[$file]=1
    fi
  done < <(compgen -f -- "$1")
  if [[ -n $1 && $1 != */* ]]; then
    while IFS= read -r command; do
      # Programs only: not the shell's builtins, functions or aliases.
      if [[ -z ${seen[$command]} ]] && type -P "$command" >/dev/null 2>&1; then
        COMPREPLY+=("$command")
        seen[$command]=1
      fi
    done < <(compgen -c -- "$1")
  fi
}

# COMPREPLY: the Python modules and packages under the current directory
# whose dotted names (pkg.mod) start with $1: .py files, and directories that
# hold Python (namespace packages too), named as Python can import them.
_ddprun_modules() {
  local file name
  while IFS= read -r file; do
    name=${file%.py}
    name=${name//\//.}
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$ ]] || continue
    if [[ -d $file ]]; then
      if compgen -G "$file/*.py" >/dev/null; then COMPREPLY+=("$name"); fi
    elif [[ $file == *.py && -f $file && ${file##*/} != __* ]]; then
      COMPREPLY+=("$name")
    fi
  done < <(compgen -f -- "${1//.//}")
}

# COMPREPLY: files starting with $1, for the program's own arguments.
_ddprun_files() {
  compopt -o filenames 2>/dev/null
  mapfile -t COMPREPLY < <(compgen -f -- "$1")
}

# COMPREPLY: this user's running ddprun processes, for ddprun dump PID.
_ddprun_pids() {
  COMPREPLY=()
  if command -v pgrep >/dev/null; then
    mapfile -t COMPREPLY < <(compgen -W "$(pgrep -u "$EUID" -x ddprun)" -- "$1")
  fi
}

_ddprun() {
  local cur=${COMP_WORDS[COMP_CWORD]} word name subcommand='' module='' i=1
  COMPREPLY=()
  # The words before the cursor: options and their values, then a subcommand
  # or the program; every word after the program is the program's.
  while ((i < COMP_CWORD)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -- ]]; then
      if ((i + 1 == COMP_CWORD)); then _ddprun_program "$cur" "$module"; else _ddprun_files "$cur"; fi
      return
    elif [[ $word == -?* ]]; then
      if _ddprun_asks_module "$word"; then module=1; fi
      name=$(_ddprun_takes_next "$word")
      if [[ -n $name ]]; then
        # COMP_WORDBREAKS holds '=': the shell splits --opt=V into --opt, =, V.
        if [[ ${COMP_WORDS[i + 1]} == = ]]; then
          if ((i + 1 == COMP_CWORD)); then
            _ddprun_values "$name" '' ''
            return
          fi
          i=$((i + 1))
        fi
        if ((i + 1 == COMP_CWORD)); then
          _ddprun_values "$name" "$cur" ''
          return
        fi
        i=$((i + 1))
      fi
    elif ((i == 1)) && [[ $word == doctor ]]; then
      subcommand=doctor
    elif ((i == 1)) && [[ $word == dump ]]; then
      if ((COMP_CWORD == 2)); then _ddprun_pids "$cur"; fi
      return
    else
      _ddprun_files "$cur"
      return
    fi
    i=$((i + 1))
  done
  case $cur in
    --*=*)
      name=${cur%%=*}
      _ddprun_values "$(_ddprun_long "${name#--}")" "${cur#*=}" "$name="
      ;;
    -*)
      # doctor takes --json besides the job's options.
      if [[ $subcommand == doctor ]]; then word=--json; else word=''; fi
      mapfile -t COMPREPLY < <(compgen -W "$_ddprun_spellings $word" -- "$cur")
      ;;
    *) if [[ $subcommand != doctor ]]; then _ddprun_program "$cur" "$module"; fi ;;
  esac
}

complete -F _ddprun ddprun
)bash";

// The table as shell variables and two case statements.
std::string BashTable() {
  std::string names, valued, torchrun, spellings, shorts, subcommands;
  std::string short_cases, value_cases;
  for (const auto& def : OptionTable()) {
    Append(names, def.name);
    if (IsTorchrunOption(def.name)) Append(torchrun, def.name);
    if (def.value_name != nullptr) Append(valued, def.name);
    for (const auto& spelling : LongSpellings(def)) Append(spellings, spelling);
    if (def.short_name != 0) {
      Append(shorts, std::string("-") + def.short_name);
      short_cases +=
          std::string("    ") + def.short_name + ") printf '%s\\n' " + def.name + " ;;\n";
    }
    const std::string pattern = std::string("    ") + def.name + ") ";
    if (auto words = ValueWords(def); !words.empty()) {
      value_cases += pattern + "_ddprun_reply \"$3\" -W '" + Joined(words) + "' -- \"$2\" ;;\n";
    } else if (TakesDirectory(def)) {
      value_cases +=
          pattern + "compopt -o filenames 2>/dev/null; _ddprun_reply \"$3\" -d -- \"$2\" ;;\n";
    }
  }
  Append(spellings, shorts);
  for (const auto& sub : kSubcommands) Append(subcommands, sub.name);
  std::ostringstream o;
  o << "\n# Every option's canonical name; those that take a value; every spelling.\n"
    << "_ddprun_names='" << names << "'\n"
    << "_ddprun_valued='" << valued << "'\n"
    << "_ddprun_torchrun='" << torchrun << "'\n"
    << "_ddprun_spellings='" << spellings << "'\n"
    << "_ddprun_subcommands='" << subcommands << "'\n"
    << "\n# The canonical name of the short option -$1.\n"
    << "_ddprun_short() {\n  case $1 in\n"
    << short_cases << "  esac\n}\n"
    << "\n# COMPREPLY: the values of option $1 (canonical) that start with $2, each after\n"
    << "# $3 (the --opt= of a word the shell did not split at '=').\n"
    << "_ddprun_values() {\n  case $1 in\n"
    << value_cases << "  esac\n}\n";
  return o.str();
}

std::string BashScript() { return kBashHeader + BashTable() + kBashFunctions; }

// ---------------------------------------------------------------------------
// zsh

// What zsh shows beside an option: its help when short, else up to the first
// ": ", "; " or ". " outside parentheses, without the "ddprun: " that marks
// ddprun's own options.
std::string Summary(std::string_view help) {
  constexpr std::string_view kOwn = "ddprun: ";
  constexpr size_t kShort = 80;
  if (help.substr(0, kOwn.size()) == kOwn) help.remove_prefix(kOwn.size());
  if (help.size() <= kShort) return std::string(help);
  int depth = 0;
  for (size_t i = 0; i + 1 < help.size(); ++i) {
    depth += help[i] == '(' ? 1 : help[i] == ')' ? -1 : 0;
    const bool stop = help[i] == ':' || help[i] == ';' || help[i] == '.';
    if (depth == 0 && stop && help[i + 1] == ' ') return std::string(help.substr(0, i));
  }
  return std::string(help);
}

// `text` with a backslash before each of `specials` and each backslash:
// _arguments reads "[description]" up to an unescaped ']' and a message up
// to an unescaped ':', and drops the backslashes.
std::string Escaped(std::string_view text, std::string_view specials) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || specials.find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// `text` as one zsh word in single quotes.
std::string Quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// One _arguments spec, e.g.
// '(-r --redirects)'{-r+,--redirects=}'[send ...]:0|1|2|3|R\:V,...:(0 1 2 3)'
std::string ZshSpec(const OptionDef& def) {
  const bool valued = def.value_name != nullptr;
  std::vector<std::string> names;
  if (def.short_name != 0) names.push_back(std::string("-") + def.short_name + (valued ? "+" : ""));
  for (const auto& spelling : LongSpellings(def)) names.push_back(spelling + (valued ? "=" : ""));
  std::string exclusion;
  for (const auto& name : names) Append(exclusion, name.substr(0, name.find_first_of("+=")));
  std::string rest = "[" + Escaped(Summary(def.help), "[]:") + "]";
  if (valued) {
    std::string action = " ";  // a message, no matches
    if (auto words = ValueWords(def); !words.empty()) action = "(" + Joined(words) + ")";
    if (TakesDirectory(def)) action = "_files -/";
    rest += ":" + Escaped(def.value_name, ":") + ":" + action;
  }
  if (names.size() == 1) return Quoted("(" + exclusion + ")" + names[0] + rest);
  std::string braced;
  for (const auto& name : names) braced += (braced.empty() ? "{" : ",") + name;
  return Quoted("(" + exclusion + ")") + braced + "}" + Quoted(rest);
}

constexpr char kZshHeader[] = R"zsh(#compdef ddprun
# zsh completion for ddprun, made by `ddprun --print-completion zsh` from its
# option table. Save it as _ddprun in a directory of $fpath before compinit
# runs: ddprun --print-completion zsh > ~/.zfunc/_ddprun, with
# fpath=(~/.zfunc $fpath) in ~/.zshrc.

# The Python modules and packages under the current directory, dotted
# (pkg.mod), for -m.
_ddprun_modules() {
  local -a modules python
  local file name expl
  for file in ${PREFIX//.//}*(N); do
    name=${${file%.py}//\//.}
    [[ $name =~ '^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$' ]] || continue
    if [[ -d $file ]]; then
      python=($file/*.py(N[1]))
      (( $#python )) && modules+=($name)
    elif [[ $file == *.py && -f $file && ${file:t} != __* ]]; then
      modules+=($name)
    fi
  done
  _wanted modules expl 'Python module' compadd -a modules
}

_ddprun() {
  local curcontext=$curcontext state state_descr line ret=1
  local -a alternatives
  typeset -A opt_args
  local -a options=(
)zsh";

// -A: no option after the first word that is not one (the program's own);
// -S: none after "--" either. The program's words complete as its own
// command line (_normal).
constexpr char kZshBody[] = R"zsh(
  _arguments -C -S -A '-*' : $options '1: :->first' '*:: :->rest' && ret=0
  case $state in
    first)
      if (( ${+opt_args[-m]} || ${+opt_args[--module]} )); then
        _ddprun_modules && ret=0
        return ret
      fi
      alternatives=(
        'scripts:Python script:_files -g "*.py(-.)"'
        'programs:executable:_files -g "*(-*)"'
      )
      # ddprun looks a name without a slash up on PATH after the current directory.
      if [[ $PREFIX != */* ]]; then alternatives+=('commands:command:_command_names -e'); fi
      if (( CURRENT == 2 )); then alternatives+=($subcommands); fi
      _alternative $alternatives && ret=0
      ;;
    rest)
      case $words[1] in
        doctor) _arguments -S : $options '--json[print the checks as JSON]' && ret=0 ;;
        dump) (( CURRENT == 2 )) && _pids && ret=0 ;;
        *) _normal && ret=0 ;;
      esac
      ;;
  esac
  return ret
}

_ddprun "$@"
)zsh";

std::string ZshScript() {
  std::string specs, subcommands;
  for (const auto& def : OptionTable()) specs += "    " + ZshSpec(def) + "\n";
  for (const auto& sub : kSubcommands) {
    Append(subcommands, std::string(sub.name) + "\\:\"" + sub.help + "\"");
  }
  return kZshHeader + specs +
         "  )\n  local subcommands=" + Quoted("subcommands:subcommand:((" + subcommands + "))") +
         kZshBody;
}

}  // namespace

std::string CompletionScript(Shell shell) {
  return shell == Shell::kBash ? BashScript() : ZshScript();
}

}  // namespace ddprun::launcher
