#include "supervisor/self_exec.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace ddprun::supervisor {
namespace {

using namespace std::string_literals;

TEST_CASE("the file mapped at an address, from a maps text") {
  const std::string maps =
      "55d0c8a00000-55d0c8a2c000 r--p 00000000 08:01 1311 /opt/bin/ddprun\n"
      "55d0c8a2c000-55d0c8b00000 r-xp 0002c000 08:01 1311 /opt/bin/ddprun\n"
      "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n"
      "7f1000000000-7f1000001000 r-xp 00000000 08:01 77 /usr/lib/my lib.so\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
  CHECK(MappedFile(maps, 0x55d0c8a2c100) == "/opt/bin/ddprun");
  CHECK(MappedFile(maps, 0x7f1000000010) == "/usr/lib/my lib.so");  // blanks in a name
  CHECK(MappedFile(maps, 0x7f0000000010).empty());                  // anonymous
  CHECK(MappedFile(maps, 0x7ffd00000010).empty());                  // [stack]
  CHECK(MappedFile(maps, 0x1000).empty());                          // unmapped
}

TEST_CASE("this code's own file is the running executable when run directly") {
  std::ifstream f("/proc/self/maps");
  std::stringstream maps;
  maps << f.rdbuf();
  char exe[4096] = {};
  REQUIRE(readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0);
  CHECK(MappedFile(maps.str(), reinterpret_cast<uintptr_t>(&MappedFile)) == exe);
  const SelfExec self = FindSelfExec();
  CHECK(self.path == "/proc/self/exe");
  CHECK(self.before.empty());
}

TEST_CASE("the loader's options are the arguments before the program's, counted from the end") {
  const std::string cmdline =
      "/lib64/ld-linux-x86-64.so.2\0--library-path\0/opt/lib\0./ddprun\0--nproc_per_node=2\0"s;
  LoaderArgs l = LoaderOptions(cmdline, 2);  // main got {"./ddprun", "--nproc_per_node=2"}
  CHECK(l.found);
  CHECK(l.options == std::vector<std::string>{"--library-path", "/opt/lib"});
  CHECK(l.program == "./ddprun");
  // An option's value may name the program as well: the count still finds it.
  l = LoaderOptions("/lib64/ld.so\0--argv0\0./ddprun\0./ddprun\0x\0"s, 2);
  CHECK(l.options == std::vector<std::string>{"--argv0", "./ddprun"});
  CHECK(l.program == "./ddprun");
  l = LoaderOptions("/lib64/ld.so\0./ddprun\0"s, 1);
  CHECK(l.found);
  CHECK(l.options.empty());
  CHECK_FALSE(LoaderOptions("./ddprun\0x\0"s, 2).found);             // the program's own: no loader
  CHECK_FALSE(LoaderOptions("/lib64/ld.so\0./ddprun\0"s, 0).found);  // count unknown
}

}  // namespace
}  // namespace ddprun::supervisor
