#include "launcher/completion.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "launcher/option_table.hpp"
#include "launcher/options.hpp"

namespace ddprun::launcher {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string Dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// The words of the shell variable `name='...'` in the bash script.
std::set<std::string> BashList(const std::string& script, const std::string& name) {
  const size_t start = script.find("\n" + name + "='");
  REQUIRE(start != std::string::npos);
  const size_t begin = start + name.size() + 3;
  std::istringstream words(script.substr(begin, script.find('\'', begin) - begin));
  std::set<std::string> out;
  for (std::string word; words >> word;) out.insert(word);
  return out;
}

std::vector<std::string> Words(const OptionDef& def) {
  auto words = ValueWords(def);
  return {words.begin(), words.end()};
}

TEST_CASE("the bash completion offers every option of the table in both spellings") {
  const std::string script = CompletionScript(Shell::kBash);
  const auto spellings = BashList(script, "_ddprun_spellings");
  const auto names = BashList(script, "_ddprun_names");
  const auto valued = BashList(script, "_ddprun_valued");
  for (const auto& def : OptionTable()) {
    CAPTURE(def.name);
    CHECK(spellings.count(std::string("--") + def.name) == 1);
    CHECK(spellings.count("--" + Dashed(def.name)) == 1);
    if (def.short_name != 0) {
      CHECK(spellings.count(std::string("-") + def.short_name) == 1);
      CHECK(Contains(
          script, std::string("    ") + def.short_name + ") printf '%s\\n' " + def.name + " ;;\n"));
    }
    CHECK(names.count(def.name) == 1);
    CHECK(valued.count(def.name) == (def.value_name != nullptr ? 1 : 0));
  }
  CHECK(BashList(script, "_ddprun_subcommands") == std::set<std::string>{"doctor", "dump"});
  CHECK(Contains(script, "\ncomplete -F _ddprun ddprun\n"));
}

TEST_CASE("the bash completion offers every value set of the table, and directories for a DIR") {
  const std::string script = CompletionScript(Shell::kBash);
  int sets = 0;
  for (const auto& def : OptionTable()) {
    CAPTURE(def.name);
    std::string joined;
    for (const auto& word : Words(def)) {
      // The words go into the script unquoted by compgen -W: nothing the shell expands.
      CHECK(word.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") == std::string::npos);
      joined += (joined.empty() ? "" : " ") + word;
    }
    if (joined.empty()) continue;
    ++sets;
    CHECK(Contains(script, std::string("\n    ") + def.name + ") _ddprun_reply \"$3\" -W '" +
                               joined + "' -- \"$2\" ;;\n"));
  }
  CHECK(sets >= 10);
  CHECK(
      Contains(script, "\n    log_dir) compopt -o filenames 2>/dev/null; _ddprun_reply \"$3\" -d"));
}

TEST_CASE("the zsh completion has an _arguments spec for every option, its words and summary") {
  const std::string script = CompletionScript(Shell::kZsh);
  CHECK(script.rfind("#compdef ddprun\n", 0) == 0);
  for (const auto& def : OptionTable()) {
    CAPTURE(def.name);
    const std::string suffix = def.value_name != nullptr ? "=" : "";
    CHECK(Contains(script, std::string("--") + def.name + suffix));
    CHECK(Contains(script, "--" + Dashed(def.name) + suffix));
    std::string joined;
    for (const auto& word : Words(def)) joined += (joined.empty() ? "" : " ") + word;
    if (!joined.empty()) CHECK(Contains(script, ":(" + joined + ")'\n"));
  }
  // Summaries: the help's first clause, brackets and colons escaped, quotes closed and reopened.
  CHECK(Contains(script, "'[workers per node]:N|cpu|gpu|auto:(cpu gpu auto)'\n"));
  CHECK(Contains(script, "{-r+,--redirects=}'[send worker stdout"));
  CHECK(Contains(script, "[rendezvous backend\\: static or c10d"));
  CHECK(Contains(script, "(also\\: ddprun doctor \\[options\\])]'\n"));
  CHECK(Contains(script, "[which workers read ddprun'\\''s stdin"));
  CHECK(Contains(script, ":HOST[\\:PORT]: '\n"));
  CHECK(Contains(script,
                 "[base directory for worker logs and error files (/dev/null\\: none)]"
                 ":DIR:_files -/'\n"));
}

TEST_CASE("--print_completion names the shell, one of bash and zsh") {
  const HostCounts host{4, {}};
  auto bash = ParseCommandLine({"--print-completion", "bash"}, {}, host);
  REQUIRE(bash.ok());
  CHECK(bash->action == Action::kPrintCompletion);
  CHECK(bash->completion_shell == Shell::kBash);
  auto zsh = ParseCommandLine({"--print_completion=zsh"}, {}, host);
  REQUIRE(zsh.ok());
  CHECK(zsh->completion_shell == Shell::kZsh);
  auto fish = ParseCommandLine({"--print-completion", "fish"}, {}, host);
  REQUIRE_FALSE(fish.ok());
  CHECK(fish.status().message() == "invalid --print_completion=fish: bash or zsh");
}

}  // namespace
}  // namespace ddprun::launcher
