#include "env/core_dump.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ddprun::env {
namespace {

CoreOwner Owner(const std::string& cwd = "/work/run") {
  CoreOwner o;
  o.pid = 4242;
  o.uid = 1000;
  o.gid = 100;
  o.signal = 11;
  o.host = "node7";
  o.cwd = cwd;
  return o;
}

TEST_CASE("core pattern: a relative template is the worker's directory's, with .PID if asked") {
  CHECK(ExpandCorePattern({"core", false}, Owner()) == "/work/run/core");
  CHECK(ExpandCorePattern({"core", true}, Owner()) == "/work/run/core.4242");
  // %p in the template: core_uses_pid adds nothing (core(5)).
  CHECK(ExpandCorePattern({"core.%p", true}, Owner()) == "/work/run/core.4242");
}

TEST_CASE("core pattern: specifiers known here are filled in, the others match anything") {
  CHECK(ExpandCorePattern({"/var/cores/%e-%u-%g-%s-%h-%P-%t-%%", false}, Owner()) ==
        "/var/cores/*-1000-100-11-node7-4242-*-%");
  CHECK(ExpandCorePattern({"core%", false}, Owner()) == "/work/run/core%");  // a trailing %
}

TEST_CASE("core pattern: a handler gets the core through a pipe, and is named") {
  CHECK(ExpandCorePattern({"|/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", false}, Owner())
            .empty());
  CHECK(DescribeCoreDump({"|/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", false}, Owner()) ==
        "piped to systemd-coredump: coredumpctl gdb 4242 "
        "(coredumpctl list)");
  CHECK(DescribeCoreDump({"|/usr/share/apport/apport -p%p -s%s -c%c", false}, Owner())
            .rfind("piped to apport: /var/crash", 0) == 0);
  CHECK(DescribeCoreDump({"|/opt/bin/crashd %p", false}, Owner()) ==
        "piped to crashd (core_pattern |/opt/bin/crashd %p; in a container, the host's handler)");
}

TEST_CASE("core dump: the file found is named with its size; an older one is not this crash's") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("core_dump_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const CorePattern pattern{(dir / "core.%p.%t").string(), false};
  CoreOwner owner = Owner("/nonexistent-dir");
  CHECK(DescribeCoreDump(pattern, owner) == "expected at " + (dir / "core.4242.*").string() +
                                                " (core_pattern " + pattern.pattern +
                                                "), but no such file");
  std::ofstream(dir / "core.4242.1764680000") << std::string(3 << 10, 'x');
  CHECK(DescribeCoreDump(pattern, owner) == (dir / "core.4242.1764680000").string() + " (3.0 KiB)");
  owner.written_after = time(nullptr) + 3600;  // the file predates the crash
  CHECK(DescribeCoreDump(pattern, owner).rfind("expected at ", 0) == 0);
  fs::remove_all(dir);
}

TEST_CASE("core dump: a relative pattern's core is looked for below where the worker started") {
  // The kernel writes it in the directory of the crash: a worker that changed
  // directory (Hydra) left it there, and "no such file" was wrong (attack 83).
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("core_below_" + std::to_string(getpid()));
  fs::create_directories(dir / "outputs/2026-12-04/23-50-01");
  fs::create_directories(dir / "data");
  CHECK(DescribeCoreDump({"core", false}, Owner(dir.string())) ==
        "not at " + (dir / "core").string() +
            " (core_pattern core is relative: the core goes to the worker's working directory "
            "when it crashed; look there if it changed directory)");
  std::ofstream(dir / "outputs/2026-12-04/23-50-01/core") << std::string(2 << 10, 'x');
  CHECK(DescribeCoreDump({"core", false}, Owner(dir.string())) ==
        (dir / "outputs/2026-12-04/23-50-01/core").string() +
            " (2.0 KiB; the worker had changed directory)");
  // Deeper than the few levels looked at: not found.
  fs::create_directories(dir / "a/b/c/d/e");
  fs::rename(dir / "outputs/2026-12-04/23-50-01/core", dir / "a/b/c/d/e/core");
  CHECK(DescribeCoreDump({"core", false}, Owner(dir.string())).rfind("not at ", 0) == 0);
  fs::remove_all(dir);
}

TEST_CASE("core pattern: read from an injected /proc, with defaults where it is missing") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("core_proc_" + std::to_string(getpid()));
  fs::create_directories(root / "sys/kernel");
  CHECK(ReadCorePattern(root.string()).pattern == "core");
  std::ofstream(root / "sys/kernel/core_pattern") << "/tmp/cores/core.%e.%p\n";
  std::ofstream(root / "sys/kernel/core_uses_pid") << "1\n";
  const CorePattern p = ReadCorePattern(root.string());
  CHECK(p.pattern == "/tmp/cores/core.%e.%p");
  CHECK(p.uses_pid);
  fs::remove_all(root);
}

}  // namespace
}  // namespace ddprun::env
