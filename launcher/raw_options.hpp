// The options as the user gave them (command line, else PET_<NAME>, else a
// default a Slurm step supplies), and the small parsers every Apply* step of
// the command line shares (launcher/options.cpp, launcher/slurm_options.cpp).
#pragma once

#include <cctype>
#include <map>
#include <optional>
#include <string>

#include "base/parse.hpp"
#include "base/status.hpp"
#include "env/environ.hpp"
#include "env/names.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/option_table.hpp"

namespace ddprun::launcher {

// Values as given: from the command line, else from PET_<NAME>.
class RawOptions {
 public:
  RawOptions(std::map<std::string, std::string> given, const env::Environ& environ)
      : given_(std::move(given)), env_(environ) {}

  std::optional<std::string> Get(const OptionDef& def) const {
    if (auto v = Said(def)) return v;
    if (auto it = defaults_.find(def.name); it != defaults_.end()) return it->second;
    return std::nullopt;
  }
  // What the user said: the command line, else PET_<NAME>.
  std::optional<std::string> Said(const OptionDef& def) const {
    if (auto it = given_.find(def.name); it != given_.end()) return it->second;
    if (!def.pet_fallback) return std::nullopt;
    return env::Lookup(env_, PetName(def.name));
  }
  std::optional<std::string> Said(const std::string& name) const { return Said(*Find(name)); }
  // How the user said it: "--name=VALUE" on the command line, else "PET_NAME=VALUE".
  std::string SaidAs(const std::string& name, const std::string& value) const {
    const OptionDef& def = *Find(name);
    return (given_.count(def.name) != 0 ? "--" + std::string(def.name) : PetName(def.name)) + "=" +
           value;
  }
  // A value for an option the user did not give (from the Slurm step).
  void SetDefault(const std::string& name, std::string value) {
    defaults_[Find(name)->name] = std::move(value);
  }
  std::optional<std::string> Get(const std::string& name) const { return Get(*Find(name)); }
  // When `s` is about options whose values came from PET_<NAME>, says so:
  // "--name=" for a valued option, "--name" alone for a flag (--no_python).
  Status NameEnvironmentSource(const Status& s) const {
    std::string sources;
    for (const auto& def : OptionTable()) {
      if (given_.count(def.name) != 0 || !def.pet_fallback) continue;
      auto v = env::Lookup(env_, PetName(def.name));
      if (v && Mentions(s.message(), def)) {
        sources += (sources.empty() ? "" : ", ") + PetName(def.name) + "=" + *v;
      }
    }
    return sources.empty() ? s : s.Annotate(sources);
  }

  static std::string PetName(const std::string& name) {
    std::string upper = env::kPetPrefix + name;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return upper;
  }

  static const OptionDef* Find(const std::string& name) { return *FindLongOption(name); }

 private:
  static bool Mentions(const std::string& message, const OptionDef& def) {
    const std::string name = std::string("--") + def.name;
    for (size_t at = message.find(name); at != std::string::npos; at = message.find(name, at + 1)) {
      const size_t end = at + name.size();
      const char next = end < message.size() ? message[end] : ' ';
      if (def.value_name != nullptr
              ? next == '='
              : !(std::isalnum(static_cast<unsigned char>(next)) || next == '_' || next == '-')) {
        return true;
      }
    }
    return false;
  }

  std::map<std::string, std::string> given_;
  std::map<std::string, std::string> defaults_;
  const env::Environ& env_;
};

// "invalid --OPTION=VALUE: ACCEPTED".
Status Bad(const std::string& option, const std::string& value, const std::string& accepted);

StatusOr<long long> ParseInt(const std::string& option, const std::string& v, long long lo,
                             long long hi, const std::string& accepted);

// The index of `v` among the words --`option` takes (ValueWords: the
// table's value_name, "heartbeat|output|torch"); the error lists them.
StatusOr<size_t> ParseWord(const std::string& option, const std::string& v);

// --nnodes: N or MIN:MAX into c.nnodes_min/max.
Status ParseNnodes(const std::string& v, LaunchConfig& c);

}  // namespace ddprun::launcher
