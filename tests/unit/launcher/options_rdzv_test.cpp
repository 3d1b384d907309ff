// The rendezvous options (--rdzv_backend, --rdzv_endpoint, --rdzv_conf,
// --rdzv_id) as ParseCommandLine reads them; the other options:
// options_test.cpp.
#include <doctest/doctest.h>

#include "launcher/job_stores.hpp"
#include "launcher/options.hpp"
#include "rendezvous/sockets.hpp"
#include "tests/unit/launcher/options_test_util.hpp"

namespace ddprun::launcher {
namespace {

using test::Contains;
using test::Error;
using test::Parse;

TEST_CASE("master_addr and master_port under c10d are said to have no effect") {
  auto p = Parse({"--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "--master_port=7", "t"});
  REQUIRE(p.ok());
  REQUIRE(p->notices.size() == 1);
  CHECK(Contains(p->notices[0], "--master_port=7 has no effect with --rdzv_backend=c10d"));
  CHECK(Parse({"--master_port=7", "t"})->notices.empty());
}

TEST_CASE("an option given twice keeps its last value, and says it replaced the first") {
  // As argparse: the second --rdzv_conf replaces the first whole, so a user who split its keys
  // lost the first ones silently (a test of this project did; its keep-alive was 5 s, not 0.5 s).
  auto p = Parse({"--rdzv_conf", "keep_alive_interval=0.5", "--rdzv_conf=read_timeout=3",
                  "--nproc_per_node=2", "--nproc-per-node", "3", "--nproc_per_node=3", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.rdzv_conf.count("keep_alive_interval") == 0);
  CHECK(p->config.rdzv_conf.at("read_timeout") == "3");
  CHECK(p->config.nproc_per_node == 3);
  REQUIRE(p->warnings.size() == 2);
  CHECK(p->warnings[1] ==
        "--nproc_per_node was given twice: its last value (3) replaces the first (2), as under "
        "torchrun");
  CHECK(p->warnings[0] ==
        "--rdzv_conf was given twice: its last value (read_timeout=3) replaces the first "
        "(keep_alive_interval=0.5), as under torchrun; to set several keys, give them in one "
        "--rdzv_conf, comma-separated (keep_alive_interval=0.5,read_timeout=3)");
  // The same value again, a flag given twice: nothing replaced.
  CHECK(Parse({"--standalone", "--standalone", "--max_restarts=1", "--max-restarts", "1", "t"})
            ->warnings.empty());
  // The same value spelled otherwise (attack 102: each was said to replace the other).
  for (const auto& pair : std::vector<std::pair<std::string, std::string>>{
           {"--shutdown_timeout=30", "--shutdown_timeout=30.0"},
           {"--max_restarts=0", "--max_restarts=+0"},
           {"--nproc_per_node=2", "--nproc_per_node=02"},
           {"--log_dir=/tmp/d", "--log_dir=/tmp/d/"},
           {"--nnodes=1", "--nnodes=1:1"},
           {"--rdzv_conf=join_timeout=60,read_timeout=5",
            "--rdzv_conf=read_timeout=5,join_timeout=60"},
           {"--rdzv_conf=read_timeout=60", "--rdzv_conf=read_timeout=60.0"}}) {
    auto same = Parse({pair.first, pair.second, "t"});
    REQUIRE(same.ok());
    CHECK_MESSAGE(same->warnings.empty(), pair.first, " ", pair.second);
  }
  // One key given a new value: nothing to join.
  auto one = Parse({"--rdzv_conf=join_timeout=60", "--rdzv_conf=join_timeout=30", "t"});
  REQUIRE(one.ok());
  REQUIRE(one->warnings.size() == 1);
  CHECK(one->warnings[0] ==
        "--rdzv_conf was given twice: its last value (join_timeout=30) replaces the first "
        "(join_timeout=60), as under torchrun");
}

TEST_CASE("a single-node job without --master_port says a --master_addr it does not use") {
  // As torchrun 2.12, the job's store is on localhost at a free port; torchrun says nothing of
  // the address dropped (attack 108: doctor passed an address no job would use).
  auto p = Parse({"--master_addr=node7.example", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.rdzv_endpoint == "localhost:0");
  REQUIRE(p->warnings.size() == 1);
  CHECK(p->warnings[0] ==
        "--master_addr=node7.example has no effect in a single-node job without --master_port, "
        "as under torchrun: its store is on localhost at a free port (give --master_port too to "
        "host it at node7.example)");
  // Loopback names are what the free port's store uses anyway; with a port, it is used.
  for (const char* addr : {"--master_addr=127.0.0.1", "--master_addr=localhost",
                           "--master_addr=127.0.1.1", "--master_addr=::1"}) {
    CHECK_MESSAGE(Parse({addr, "t"})->warnings.empty(), addr);
  }
  CHECK(Parse({"--master_addr=node7.example", "--master_port=29511", "t"})->warnings.empty());
  // From the environment, named as it was given (attack 110: called --master_addr).
  auto pet = Parse({"t"}, {{"PET_MASTER_ADDR", "node7.example"}});
  REQUIRE(pet.ok());
  REQUIRE(pet->warnings.size() == 1);
  CHECK(pet->warnings[0].rfind("PET_MASTER_ADDR=node7.example has no effect", 0) == 0);
}

TEST_CASE("a key given twice inside one --rdzv_conf keeps its last value, and says so") {
  // torchrun's dict keeps the last value without a word; the first was lost silently.
  auto p = Parse({"--rdzv_conf=join_timeout=5,read_timeout=3,join_timeout=7", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.rdzv_conf.at("join_timeout") == "7");
  CHECK(p->config.rdzv_conf.at("read_timeout") == "3");
  REQUIRE(p->warnings.size() == 1);
  CHECK(p->warnings[0] ==
        "--rdzv_conf gives join_timeout twice: its last value (7) replaces the first (5), as "
        "under torchrun");
  // The same value twice replaces nothing.
  CHECK(Parse({"--rdzv_conf=join_timeout=5, join_timeout=5", "t"})->warnings.empty());
}

TEST_CASE("an unknown --rdzv_conf key is warned of, with the known key nearest a typo") {
  // Found by an attacking helper (attack 99): a typo (join_timout) was an info line, easy to miss,
  // and the job then waited the default 600 s.
  auto typo = Parse({"--rdzv_conf=join_timout=60", "t"});
  REQUIRE(typo.ok());
  REQUIRE(typo->warnings.size() == 1);
  CHECK(Contains(typo->warnings[0],
                 "--rdzv_conf join_timout=60 is not a key ddprun knows, so "
                 "nothing reads it: did you mean join_timeout?"));
  auto far = Parse({"--rdzv_conf=colour=blue", "t"});
  REQUIRE(far.ok());
  REQUIRE(far->warnings.size() == 1);
  CHECK_FALSE(Contains(far->warnings[0], "did you mean"));
  CHECK(Parse({"--rdzv_conf=join_timeout=60,read_timeout=5", "t"})->warnings.empty());
  // Every key some code reads is known: none warned of.
  CHECK(Parse({"--rdzv_conf=join_timeout=5,last_call_timeout=1,keep_alive_interval=1,"
               "keep_alive_max_attempt=2,read_timeout=5,timeout=5,is_host=1,token=x,"
               "store_type=tcp,close_timeout=1,heartbeat_timeout=1,use_libuv=1",
               "t"})
            ->warnings.empty());
  CHECK(Contains(far->warnings[0],
                 "(the keys: join_timeout, last_call_timeout, "
                 "keep_alive_interval, keep_alive_max_attempt, read_timeout, "
                 "timeout, is_host, token, store_type; close_timeout, "
                 "heartbeat_timeout, use_libuv change nothing here)"));
}

TEST_CASE("every rdzv_conf duration refuses nan; keep_alive_max_attempt is a whole number") {
  for (const char* key : {"join_timeout", "timeout", "last_call_timeout", "keep_alive_interval",
                          "read_timeout", "close_timeout", "heartbeat_timeout"}) {
    const std::string conf = std::string(key) + "=nan";
    CAPTURE(conf);
    CHECK(Contains(Error({"--rdzv_conf=" + conf, "t"}),
                   "invalid --rdzv_conf " + conf + ": a number of seconds > 0"));
  }
  CHECK(Contains(Error({"--rdzv_conf=keep_alive_max_attempt=2.5", "t"}),
                 "invalid --rdzv_conf keep_alive_max_attempt=2.5: a whole number >= 1"));
  CHECK(Contains(Error({"--rdzv_conf=keep_alive_max_attempt=0", "t"}), "a whole number >= 1"));
  CHECK(Contains(Error({"--rdzv_conf=is_host=maybe", "t"}), "invalid --rdzv_conf is_host=maybe"));
  CHECK(Contains(Error({"--rdzv_conf=use_libuv=2", "t"}), "invalid --rdzv_conf use_libuv=2"));
  CHECK(Parse({"--rdzv_conf=join_timeout=5,keep_alive_max_attempt=3,is_host=0", "t"}).ok());
}

TEST_CASE("standalone, implicit or given, replaces --rdzv_id with a random one, as torchrun") {
  for (const auto& args : {std::vector<std::string>{"--rdzv_id=mine", "t"},
                           std::vector<std::string>{"--standalone", "--rdzv_id=mine", "t"}}) {
    auto p = Parse(args);
    REQUIRE(p.ok());
    CHECK(p->config.rdzv_backend == "c10d");
    CHECK(p->config.rdzv_id != "mine");
    CHECK(p->config.rdzv_id.size() == 36);
  }
}

TEST_CASE("a rendezvous endpoint that names no host is a usage error") {
  for (const char* endpoint :
       {":::", ":29400", "a b:1", "host:abc", "host:70000", "[::1", "[::1]x", "host\n:1"}) {
    CAPTURE(endpoint);
    auto p = Parse({"--rdzv_backend=c10d", std::string("--rdzv_endpoint=") + endpoint, "t"});
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == StatusCode::kInvalidArgument);
    CHECK(Contains(p.status().message(), "invalid --rdzv_endpoint="));
    CHECK(Contains(p.status().message(), "HOST[:PORT]"));
  }
  for (const char* endpoint : {"node1", "node1:29400", "10.0.0.1:1", "[::1]:29400", "::1",
                               "fe80::1%eth0", "my_host.example.com"}) {
    CAPTURE(endpoint);
    CHECK(Parse({"--rdzv_backend=c10d", std::string("--rdzv_endpoint=") + endpoint, "t"}).ok());
  }
}

TEST_CASE("an IPv6 endpoint without brackets takes its port after the last colon, as torchrun") {
  struct Case {
    const char* endpoint;
    const char* host;
    int port;
  };
  for (const Case& c :
       {Case{"::1:29561", "::1", 29561}, Case{"fe80::2:80", "fe80::2", 80},
        Case{"::1", "::1", 29400}, Case{"fe80::1", "fe80::1", 29400},
        Case{"fe80::1%eth0", "fe80::1%eth0", 29400}, Case{"[::1]:29561", "::1", 29561}}) {
    CAPTURE(c.endpoint);
    std::string host;
    int port = 0;
    REQUIRE(rendezvous::SplitHostPort(c.endpoint, 29400, &host, &port).ok());
    CHECK(host == c.host);
    CHECK(port == c.port);
  }
}

TEST_CASE("rdzv_conf: quotes around the value and blanks go, as PyTorch's own tests pass it") {
  auto p = Parse({"--rdzv-conf='join_timeout=5, last_call_timeout = 1,timeout=5'", "./train"});
  REQUIRE(p.ok());
  CHECK(p->config.rdzv_conf.at("join_timeout") == "5");
  CHECK(p->config.rdzv_conf.at("last_call_timeout") == "1");
  CHECK(p->config.rdzv_conf.at("timeout") == "5");
  CHECK(Contains(Error({"--rdzv_conf=a=1,,b=2", "./train"}), "has no KEY=VALUE form"));
  CHECK(Contains(Error({"--rdzv_conf=a= ", "./train"}), "has no KEY=VALUE form"));
}

TEST_CASE("rdzv_conf: each backend reads its own keys, as torchrun") {
  LaunchConfig c;
  c.rdzv_backend = "c10d";
  c.rdzv_conf = {{"join_timeout", "5"}, {"timeout", "7"}};
  std::vector<std::string> notices;
  auto s = SettingsFromConfig(c, {}, &notices);
  REQUIRE(s.ok());
  CHECK(s->join_timeout == std::chrono::seconds(5));
  REQUIRE(notices.size() == 1);
  CHECK(Contains(notices[0], "timeout=7 has no effect with --rdzv_backend=c10d"));
  c.rdzv_backend = "static";
  c.rdzv_conf = {{"timeout", "7"}, {"last_call_timeout", "1"}};
  notices.clear();
  s = SettingsFromConfig(c, {}, &notices);
  REQUIRE(s.ok());
  CHECK(s->join_timeout == std::chrono::seconds(7));
  REQUIRE(notices.size() == 1);
  CHECK(Contains(notices[0], "last_call_timeout=1 has no effect with the static backend"));
}

TEST_CASE("an IPv6 --master_addr or --local_addr in brackets is the address inside") {
  auto p = Parse({"--master_addr=[::1]", "--master_port=1234", "--local_addr=[fe80::1%eth0]", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.master_addr == "::1");
  CHECK(p->config.local_addr == "fe80::1%eth0");
  p = Parse({"--master_addr=::1", "--master_port=1234", "t"});
  REQUIRE(p.ok());
  CHECK(p->config.master_addr == "::1");
  for (const char* bad : {"--master_addr=[node1]", "--master_addr=[::1", "--local_addr=[]"}) {
    CAPTURE(bad);
    CHECK(Contains(Error({bad, "--master_port=1234", "t"}), "a host name or an IP address"));
  }
}

TEST_CASE("a static --rdzv_endpoint without a port takes --master_port's, or is refused") {
  LaunchConfig c;
  c.rdzv_backend = "static";
  c.rdzv_endpoint = "node0:1234";
  std::string host;
  int port = 0;
  REQUIRE(StaticStoreAddress(c, &host, &port).ok());
  CHECK((host == "node0" && port == 1234));
  c.master_port = 777;  // the endpoint's port wins
  REQUIRE(StaticStoreAddress(c, &host, &port).ok());
  CHECK(port == 1234);
  c.rdzv_endpoint = "node0";
  REQUIRE(StaticStoreAddress(c, &host, &port).ok());
  CHECK((host == "node0" && port == 777));
  // torchrun: "Port is absent in endpoint"; it was 29500 without a word.
  c.master_port.reset();
  const Status s = StaticStoreAddress(c, &host, &port);
  REQUIRE_FALSE(s.ok());
  CHECK(Contains(s.message(), "--rdzv_endpoint=node0 has no port"));
  CHECK(Contains(s.message(), "give --rdzv_endpoint=HOST:PORT (or --master_port=PORT)"));
}
}  // namespace
}  // namespace ddprun::launcher
