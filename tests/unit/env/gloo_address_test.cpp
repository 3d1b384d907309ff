#include "env/gloo_address.hpp"

#include <doctest/doctest.h>
#include <net/if.h>
#include <sys/socket.h>

namespace ddprun::env {
namespace {

constexpr unsigned kUp = IFF_UP | IFF_RUNNING;

std::vector<NetInterface> Host(bool with_ib) {
  std::vector<NetInterface> h = {
      {"lo", kUp | IFF_LOOPBACK, {{AF_INET, "127.0.0.1"}, {AF_INET6, "::1"}}},
      {"eth0", kUp, {{AF_INET, "10.0.0.5"}, {AF_INET6, "fe80::1"}}},
      {"docker0", IFF_UP, {{AF_INET, "172.17.0.1"}}},  // up but not running: no carrier
      {"wg0", kUp, {{AF_INET6, "fe80::2"}}},           // link-local only
  };
  if (with_ib) h.push_back({"ib0", kUp, {{AF_INET, "192.168.1.5"}}});
  return h;
}

TEST_CASE("gloo address: loopback is 127.0.0.0/8 and ::1") {
  CHECK(IsLoopback({AF_INET, "127.0.1.1"}));
  CHECK(IsLoopback({AF_INET6, "::1"}));
  CHECK_FALSE(IsLoopback({AF_INET, "10.0.0.5"}));
  CHECK_FALSE(IsLoopback({AF_INET6, "fe80::1"}));
  CHECK(IsLoopback({AF_INET6, "0:0:0:0:0:0:0:1"}));
  CHECK(IsLoopback({AF_INET6, "::ffff:127.0.0.1"}));
  CHECK_FALSE(IsLoopback({AF_INET6, "::ffff:10.0.0.1"}));
}

TEST_CASE("LoopbackName tells loopback in every spelling, without resolving") {
  for (const char* host :
       {"localhost", "127.0.0.1", "127.1", "::1", "[::1]", "0:0:0:0:0:0:0:1",
        "0000:0000:0000:0000:0000:0000:0000:0001", "[0::1]", "::ffff:127.0.0.1"}) {
    CAPTURE(host);
    CHECK(LoopbackName(host));
  }
  for (const char* host : {"node1", "10.0.0.1", "::2", "fe80::1", "[::1", "::ffff:10.0.0.1", ""}) {
    CAPTURE(host);
    CHECK_FALSE(LoopbackName(host));
  }
}

TEST_CASE("gloo address: the interfaces to choose are up, running and reachable from elsewhere") {
  CHECK(GlooIfnameChoices(Host(false)) == "eth0");
  CHECK(GlooIfnameChoices(Host(true)) == "eth0 or ib0");
  CHECK(GlooIfnameChoices({Host(false)[0]}).empty());
  // Nothing with a carrier: those up will do (a veth under gVisor reports none).
  CHECK(GlooIfnameChoices({Host(false)[0], Host(false)[2]}) == "docker0");
}

TEST_CASE("gloo address: a host name that maps to loopback warns in a multi-node job only") {
  const NetAddress loop{AF_INET, "127.0.1.1"};
  auto multi = GlooAddressCheck("node7", loop, Host(false), false, true);
  CHECK(multi.status == CheckStatus::kWarn);
  CHECK(multi.check == "Gloo's address");
  CHECK(multi.measured.rfind("host name node7 resolves to 127.0.1.1, a loopback address: "
                             "PyTorch's Gloo, with GLOO_SOCKET_IFNAME unset",
                             0) == 0);
  CHECK(multi.measured.find("ranks on other nodes fail to connect") != std::string::npos);
  CHECK(multi.fix.rfind("export GLOO_SOCKET_IFNAME=eth0 on every node", 0) == 0);
  CHECK(multi.fix.find("map node7 to its network address in /etc/hosts") != std::string::npos);
  auto two = GlooAddressCheck("node7", loop, Host(true), false, true);
  CHECK(two.fix.rfind("export GLOO_SOCKET_IFNAME=NAME, the interface the other nodes reach this "
                      "one by (here eth0 or ib0)",
                      0) == 0);

  auto single = GlooAddressCheck("node7", loop, Host(false), false, false);
  CHECK(single.status == CheckStatus::kOk);
  CHECK(single.measured.find("(enough while every node runs on this host)") != std::string::npos);
  CHECK(single.fix.empty());
}

TEST_CASE("gloo address: set by GLOO_SOCKET_IFNAME, or a routable address, is ok") {
  CHECK(GlooAddressCheck("n", NetAddress{AF_INET, "127.0.1.1"}, Host(false), true, true).status ==
        CheckStatus::kOk);
  auto routable = GlooAddressCheck("n", NetAddress{AF_INET, "10.0.0.5"}, Host(false), false, true);
  CHECK(routable.status == CheckStatus::kOk);
  CHECK(routable.measured ==
        "host name n resolves to 10.0.0.5, which Gloo tells the other ranks "
        "to connect to");
  // No address binds: Gloo's own fallback is loopback too.
  auto none = GlooAddressCheck("n", std::nullopt, Host(false), false, true);
  CHECK(none.status == CheckStatus::kWarn);
  CHECK(none.measured.find("falls back to 127.0.0.1") != std::string::npos);
}

TEST_CASE("gloo address: resolved and bound as Gloo does") {
  auto a = GlooDefaultAddress("localhost");
  REQUIRE(a.has_value());
  CHECK(IsLoopback(*a));
  CHECK_FALSE(GlooDefaultAddress("no-such-host.invalid").has_value());
  CHECK(OnlyLoopback("127.0.0.1"));
  CHECK(OnlyLoopback("::1"));
  CHECK(OnlyLoopback("localhost"));
  CHECK_FALSE(OnlyLoopback("192.0.2.7"));
  CHECK_FALSE(OnlyLoopback("no-such-host.invalid"));
}

}  // namespace
}  // namespace ddprun::env
