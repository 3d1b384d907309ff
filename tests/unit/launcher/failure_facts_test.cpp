#include "launcher/failure_facts.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ddprun::launcher {
namespace {

Program Run(std::string path) {
  Program p;
  p.argv = {std::move(path)};
  return p;
}

TEST_CASE("a shell by name, or a script whose #! line names one, runs a shell") {
  CHECK(RunsAShell(Run("/bin/sh")));
  CHECK(RunsAShell(Run("/usr/bin/bash")));
  CHECK(RunsAShell(Run("zsh")));
  CHECK_FALSE(RunsAShell(Run("/usr/bin/python3")));
  CHECK_FALSE(RunsAShell(Program{}));

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("runs_a_shell_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "direct.sh") << "#!/bin/bash -e\necho hi\n";
  std::ofstream(dir / "via_env.sh") << "#! /usr/bin/env dash\necho hi\n";
  std::ofstream(dir / "python.py") << "#!/usr/bin/env python3\nprint(1)\n";
  std::ofstream(dir / "binary") << "\x7f"
                                   "ELF";
  CHECK(RunsAShell(Run((dir / "direct.sh").string())));
  CHECK(RunsAShell(Run((dir / "via_env.sh").string())));
  CHECK_FALSE(RunsAShell(Run((dir / "python.py").string())));
  CHECK_FALSE(RunsAShell(Run((dir / "binary").string())));
  CHECK_FALSE(RunsAShell(Run((dir / "missing").string())));
  // Under Python (a .py program): never a shell.
  Program py = Run("/bin/sh");
  py.interpreter = "/usr/bin/python3";
  CHECK_FALSE(RunsAShell(py));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::launcher
