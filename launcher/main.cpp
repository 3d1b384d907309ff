// ddprun: a torchrun-compatible launcher and supervisor.
//
// main reads as the launcher's lifecycle: parse the command line, resolve
// the program, run the agent, map the outcome to an exit code.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>
#include <vector>

#include "env/environ.hpp"
#include "env/host.hpp"
#include "env/names.hpp"
#include "launcher/agent.hpp"
#include "launcher/option_table.hpp"
#include "launcher/options.hpp"
#include "launcher/program.hpp"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "0.0.0"
#endif

namespace {

constexpr int kUsageExit = 2;

void SetUpLogging(const ddprun::env::Environ& environ) {
  auto logger = spdlog::stderr_color_mt("ddprun");
  logger->set_pattern("%^[ddprun %H:%M:%S %l]%$ %v");
  std::string level = ddprun::env::Lookup(environ, ddprun::env::kLogLevel).value_or("INFO");
  for (auto& ch : level) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (level == "warning") level = "warn";
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

int ExitCodeFor(const ddprun::Status& s) {
  switch (s.code()) {
    case ddprun::StatusCode::kNotFound:
      return 127;
    case ddprun::StatusCode::kPermissionDenied:
      return 126;
    default:
      return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun;  // NOLINT: main only
  const env::Environ environ = env::CurrentEnviron();
  SetUpLogging(environ);
  std::vector<std::string> args(argv + 1, argv + argc);
  launcher::HostCounts host{env::CpuCount(),
                            env::GpuCount(env::Lookup(environ, env::kCudaVisibleDevices))};
  auto parsed = launcher::ParseCommandLine(args, environ, host);
  if (!parsed.ok()) {
    std::fprintf(stderr, "ddprun: %s\n", parsed.status().message().c_str());
    return kUsageExit;
  }
  if (parsed->action == launcher::Action::kHelp) {
    std::fputs(launcher::HelpText().c_str(), stdout);
    return 0;
  }
  if (parsed->action == launcher::Action::kVersion) {
    std::printf("ddprun %s\n", DDPRUN_VERSION);
    return 0;
  }
  for (const auto& notice : parsed->notices) spdlog::info("{}", notice);
  auto program = launcher::ResolveProgram(parsed->config, environ);
  if (!program.ok()) {
    std::fprintf(stderr, "ddprun: cannot run %s: %s\n", parsed->config.program.c_str(),
                 program.status().message().c_str());
    return ExitCodeFor(program.status());
  }
  return launcher::RunAgent(parsed->config, *program, environ);
}
