#include "launcher/inherited_signals.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <set>
#include <string>
#include <vector>

namespace ddprun::launcher {
namespace {

LaunchConfig Defaults() {
  LaunchConfig c;
  c.handled_signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  return c;
}

TEST_CASE("nohup's SIGHUP stays ignored, for ddprun and the workers, and a notice says so") {
  LaunchConfig c = Defaults();
  const auto notices = KeepSignalsIgnored({SIGHUP, SIGPIPE}, c);
  CHECK(c.handled_signals == std::set<int>{SIGTERM, SIGINT, SIGQUIT});
  CHECK(c.signals_to_handle == "SIGINT,SIGQUIT,SIGTERM");  // what the workers are told
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].rfind("SIGHUP was ignored when ddprun started (nohup", 0) == 0);
  CHECK(notices[0].find("--signals_to_handle=SIGHUP handles it anyway") != std::string::npos);
  // SIGPIPE comes back to its default in the workers, as Python's subprocess does.
  CHECK(c.workers_ignore == std::set<int>{SIGHUP});
}

TEST_CASE("a script's background job keeps SIGINT and SIGQUIT ignored") {
  LaunchConfig c = Defaults();
  const auto notices = KeepSignalsIgnored({SIGINT, SIGQUIT, SIGUSR2}, c);
  CHECK(c.handled_signals == std::set<int>{SIGTERM, SIGHUP});
  CHECK(notices.size() == 2);
  CHECK(c.workers_ignore == std::set<int>{SIGINT, SIGQUIT, SIGUSR2});
}

TEST_CASE("signals named by --signals_to_handle are handled even when they were ignored") {
  LaunchConfig c = Defaults();
  c.signals_given = true;
  c.signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  CHECK(KeepSignalsIgnored({SIGHUP, SIGXFSZ}, c).empty());
  CHECK(c.handled_signals.count(SIGHUP) == 1);
  CHECK(c.signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(c.workers_ignore.empty());  // handled by ddprun: the workers get the default
}

TEST_CASE("nothing ignored at start changes nothing") {
  LaunchConfig c = Defaults();
  c.signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  CHECK(KeepSignalsIgnored({}, c).empty());
  CHECK(c.handled_signals.size() == 4);
  CHECK(c.signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(c.workers_ignore.empty());
}

}  // namespace
}  // namespace ddprun::launcher
