#include "launcher/option_checks.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "env/log_layout.hpp"
#include "env/names.hpp"
#include "launcher/option_table.hpp"
#include "launcher/raw_options.hpp"
#include "launcher/torch_hook.hpp"

namespace ddprun::launcher {

// Options ddprun accepts but that cannot change what it does: said once.
void NoteIneffective(const RawOptions& raw, ParsedCommandLine& parsed) {
  if (auto v = raw.Get("monitor_interval")) {
    parsed.notices.push_back("--monitor_interval=" + *v +
                             " has no effect: ddprun reacts to worker exits as they happen");
  }
  // torchrun warns the same way: c10d finds its store at --rdzv_endpoint.
  if (raw.Get("rdzv_backend").value_or("static") == "c10d" && !raw.Get("standalone")) {
    for (const char* name : {"master_addr", "master_port"}) {
      if (auto v = raw.Get(name)) {
        parsed.notices.push_back(std::string("--") + name + "=" + *v +
                                 " has no effect with --rdzv_backend=c10d: the store is at "
                                 "--rdzv_endpoint, and the workers' MASTER_ADDR and "
                                 "MASTER_PORT are its");
      }
    }
  }
  if (auto v = raw.Get("start_method"); v && *v != "spawn") {
    parsed.notices.push_back("--start_method=" + *v +
                             " has no effect: ddprun always starts workers as new processes");
  }
}

void CheckProgram(ParsedCommandLine& parsed) {
  const LaunchConfig& c = parsed.config;
  const std::string flag = c.hang_detect_torch && c.no_python && IsPythonName(c.program)
                               ? HookBlockingFlag(c.program_args)
                               : "";
  if (flag.empty()) return;
  const char* why = flag == "-S" ? "imports no site module, which loads"
                                 : "ignores PYTHONPATH, where ddprun puts";
  parsed.warnings.push_back(c.program + " " + flag + " " + why +
                            " the hook of --hang_detect=torch: it sees no collective, finds no "
                            "hang and serves no `ddprun dump`; drop " +
                            flag + " or use --hang_detect=heartbeat");
}

Status CheckCombinations(const env::Environ& environ, ParsedCommandLine& parsed) {
  const LaunchConfig& c = parsed.config;
  const bool no_files = c.log_dir == "/dev/null";
  const bool limits = c.hang_timeout > 0 || c.startup_timeout > 0;
  const std::string detect = c.hang_detect_torch ? "torch" : "heartbeat";
  // Heartbeats are files under the log directory; the hook's are too.
  if (no_files && limits && !c.hang_detect_output) {
    return InvalidArgument(
        "--hang_timeout and --startup_timeout need the workers' heartbeat files (--hang_detect=" +
        detect +
        "), and --log_dir=/dev/null leaves nowhere to keep them: every worker would be taken "
        "for hung; give a --log_dir, or use --hang_detect=output");
  }
  if ((c.hang_detect_torch || c.hang_detect_output) && !limits) {
    parsed.warnings.push_back(
        std::string("--hang_detect=") + (c.hang_detect_torch ? "torch" : "output") +
        " finds no hang without --hang_timeout or --startup_timeout" +
        (c.hang_detect_torch ? " (its hook still serves `ddprun dump`)" : ""));
  }
  if (c.hang_detect_torch && c.hang_timeout > 0 && c.startup_timeout <= 0) {
    parsed.notices.push_back(
        "--hang_detect=torch watches each rank from its first collective: a hang before every "
        "rank's first (in init_process_group, say) is found only with --startup_timeout (off)");
  }
  if (c.hang_detect_torch) {
    const auto size = env::Lookup(environ, env::kFrBufferSize);
    if (size && std::atol(size->c_str()) <= 0) {
      parsed.warnings.push_back(
          std::string(env::kFrBufferSize) + "=" + *size +
          " turns PyTorch's flight recorder off: --hang_detect=torch then sees no collective and "
          "finds no hang; unset it (ddprun sets 2000) or give a size above 0");
    }
  }
  if (auto problem = env::TempDirectoryProblem(env::Lookup(environ, "TMPDIR").value_or(""))) {
    parsed.warnings.push_back(*problem);
  }
  // A misspelt PET_ variable would quietly leave its option at the default.
  for (const auto& [key, value] : environ) {
    if (key.rfind(env::kPetPrefix, 0) != 0) continue;
    std::string name = key.substr(std::string(env::kPetPrefix).size());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    const OptionDef* best = nullptr;
    size_t distance = 0;
    bool known = false;
    for (const OptionDef& def : OptionTable()) {
      if (!def.pet_fallback) continue;
      known |= name == def.name;
      const bool prefix = std::string(def.name).rfind(name, 0) == 0;  // PET_NPROC
      const size_t d = prefix ? 0 : EditDistance(name, def.name);
      if (best == nullptr || d < distance) best = &def, distance = d;
    }
    if (known || best == nullptr) continue;
    parsed.warnings.push_back(
        key + " is set but is no option's variable, so nothing reads it" +
        (distance <= 3 ? ": did you mean " + RawOptions::PetName(best->name) + "?" : ""));
  }
  if (no_files) {
    for (const auto& [name, filters] :
         {std::pair{"duplicate_stdout_filters", &c.duplicate_stdout_filters},
          {"duplicate_stderr_filters", &c.duplicate_stderr_filters}}) {
      if (!filters->empty()) {
        parsed.warnings.push_back(std::string("--") + name +
                                  " does nothing with --log_dir=/dev/null: the lines it picks "
                                  "go to a file in the log directory");
      }
    }
    bool redirected = false;
    for (int r = 0; r < c.nproc_per_node; ++r) redirected |= c.redirects.For(r) != 0;
    if (redirected) {
      parsed.warnings.push_back(
          "-r/--redirects with --log_dir=/dev/null discards the redirected output: it goes to no "
          "file and not to the console (a failure's report then has no traceback)");
    }
  }
  return Status::Ok();
}

}  // namespace ddprun::launcher
