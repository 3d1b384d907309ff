#include "env/interfaces.hpp"

#include <doctest/doctest.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ddprun::env {
namespace {

// A host like a cluster node: loopback, a bonded interface with addresses, a
// bond slave without one, a second address family on one interface.
std::vector<NetInterface> Host() {
  const unsigned up = IFF_UP | IFF_RUNNING;
  return {
      {"lo", up | IFF_LOOPBACK, {{AF_INET, "127.0.0.1"}, {AF_INET6, "::1"}}},
      {"ens35f0np0", up, {}},
      {"bond0", up, {{AF_INET, "192.168.66.20"}, {AF_INET6, "fe80::1"}}},
      {"ib0", up, {{AF_INET6, "fd00::7"}}},
  };
}

TEST_CASE("GLOO_SOCKET_IFNAME: exact names with an address; PyTorch ignores one character") {
  CHECK_FALSE(GlooIfnameProblem("bond0", Host()));
  CHECK_FALSE(GlooIfnameProblem("lo,bond0", Host()));
  CHECK_FALSE(GlooIfnameProblem("bond0,", Host()));  // a trailing comma: no entry
  CHECK_FALSE(GlooIfnameProblem("ib0", Host()));     // IPv6 only is an address too
  CHECK_FALSE(GlooIfnameProblem("x", Host()));
  CHECK_FALSE(GlooIfnameProblem("", Host()));
  CHECK(GlooIfnameProblem("eth0", Host()) == "eth0 is no interface of this host");
  CHECK(GlooIfnameProblem("bond", Host()) == "bond is no interface of this host");  // no prefixes
  CHECK(GlooIfnameProblem("ens35f0np0", Host()) == "ens35f0np0 has no IP address");
  CHECK(GlooIfnameProblem("lo,,bond0", Host()) == "an empty entry (a comma too many)");
  CHECK(GlooIfnameProblem(",bond0", Host()) == "an empty entry (a comma too many)");
  CHECK(GlooIfnameProblem("^lo,docker", Host()) ==
        "^lo is no interface name (^ and = are NCCL_SOCKET_IFNAME's syntax; Gloo takes exact "
        "names), docker is no interface of this host");
  CHECK(GlooIfnameProblem("192.168.66.20", Host()) ==
        "192.168.66.20 is an address, not an interface name (bond0 has it)");
  CHECK(GlooIfnameProblem("192.168.66.", Host()) ==
        "192.168.66. is an address, not an interface name (bond0 has it)");
  CHECK(GlooIfnameProblem("10.0.0.1", Host()) == "10.0.0.1 is an address, not an interface name");
}

TEST_CASE("NCCL_SOCKET_IFNAME: prefixes, ^ excludes, = exact, :port, the family") {
  CHECK_FALSE(NcclIfnameProblem("bond", "", Host()));
  CHECK_FALSE(NcclIfnameProblem("eth,bond0:5000", "", Host()));
  CHECK_FALSE(NcclIfnameProblem("=bond0", "", Host()));
  CHECK_FALSE(NcclIfnameProblem("^lo,docker", "", Host()));
  CHECK_FALSE(NcclIfnameProblem("ib", "AF_INET6", Host()));
  CHECK_FALSE(NcclIfnameProblem("^", "", Host()));  // one character: NCCL ignores it
  CHECK(NcclIfnameProblem("eth", "", Host()) == "no interface with an address starts with eth");
  CHECK(NcclIfnameProblem("=bond", "", Host()) == "no interface with an address is named bond");
  CHECK(NcclIfnameProblem("ens35", "", Host()) == "no interface with an address starts with ens35");
  CHECK(NcclIfnameProblem("^lo,bond,ib", "", Host()) ==
        "it excludes every interface with an address");
  CHECK(NcclIfnameProblem("ib", "AF_INET", Host()) ==
        "no interface with an address starts with ib (of family AF_INET: NCCL_SOCKET_FAMILY)");
  CHECK(NcclIfnameProblem("192.168.66.20", "", Host()) ==
        "no interface with an address starts with 192.168.66.20; it takes interface names, not "
        "addresses");
  // ::1 is no address NCCL uses.
  std::vector<NetInterface> only_v6_loopback = {{"lo", IFF_UP, {{AF_INET6, "::1"}}}};
  CHECK(NcclIfnameProblem("lo", "", only_v6_loopback) ==
        "no interface with an address starts with lo");
}

TEST_CASE("the checks: one per variable set, failing with what the host has") {
  CHECK(SocketInterfaceChecks({}, Host(), {}).empty());
  CHECK(SocketInterfaceChecks({{"GLOO_SOCKET_IFNAME", "x"}}, Host(), {}).empty());
  // No interface known (getifaddrs failed): no verdict on the names.
  CHECK(
      SocketInterfaceChecks({{"GLOO_SOCKET_IFNAME", "eth0"}, {"NCCL_SOCKET_IFNAME", "eth"}}, {}, {})
          .empty());
  auto checks = SocketInterfaceChecks(
      {{"GLOO_SOCKET_IFNAME", "eth0"}, {"NCCL_SOCKET_IFNAME", "=bond0"}}, Host(), {});
  REQUIRE(checks.size() == 2);
  CHECK(checks[0].check == "GLOO_SOCKET_IFNAME=eth0");
  CHECK(checks[0].status == CheckStatus::kFail);
  CHECK(checks[0].measured ==
        "eth0 is no interface of this host: Gloo's init_process_group would fail (\"Unable to find "
        "address for\")");
  CHECK(checks[0].fix ==
        "set it to interfaces of this host with an address (lo 127.0.0.1, bond0 192.168.66.20, "
        "ib0 fd00::7), the ones other nodes reach it by, or unset it");
  CHECK(checks[1].check == "NCCL_SOCKET_IFNAME==bond0");
  CHECK(checks[1].status == CheckStatus::kOk);
  auto nccl = SocketInterfaceChecks(
      {{"NCCL_SOCKET_IFNAME", "ib"}, {"NCCL_SOCKET_FAMILY", "AF_INET"}}, Host(), {});
  REQUIRE(nccl.size() == 1);
  CHECK(nccl[0].status == CheckStatus::kFail);
  CHECK(nccl[0].measured.find("(of family AF_INET: NCCL_SOCKET_FAMILY)") != std::string::npos);
  // Attack 80: no GPU visible, the workers use Gloo; the job ran where doctor said FAILED.
  auto cpu = SocketInterfaceChecks({{"NCCL_SOCKET_IFNAME", "bogus"}}, Host(), {}, /*gpus=*/0);
  REQUIRE(cpu.size() == 1);
  CHECK(cpu[0].status == CheckStatus::kWarn);
  CHECK(cpu[0].measured.find("; no GPU is visible, so the workers use Gloo, not NCCL") !=
        std::string::npos);
  CHECK(SocketInterfaceChecks({{"NCCL_SOCKET_IFNAME", "bogus"}}, Host(), {}, 1)[0].status ==
        CheckStatus::kFail);
}

TEST_CASE("NCCL_IB_HCA: NCCL's list syntax over the InfiniBand devices; a warning") {
  const std::vector<std::string> devices = {"mlx5_0", "mlx5_1", "mlx5_bond_0"};
  CHECK_FALSE(NcclHcaProblem("mlx5", devices));
  CHECK_FALSE(NcclHcaProblem("mlx5_0:1,mlx5_1:1", devices));
  CHECK_FALSE(NcclHcaProblem("=mlx5_bond_0", devices));
  CHECK_FALSE(NcclHcaProblem("^mlx5_0", devices));
  CHECK(NcclHcaProblem("rocep200s0f0", devices) ==
        "no InfiniBand device of this host starts with rocep200s0f0");
  CHECK(NcclHcaProblem("=mlx5", devices) == "no InfiniBand device of this host is named mlx5");
  CHECK(NcclHcaProblem("^mlx5", devices) == "it excludes every InfiniBand device of this host");
  CHECK(NcclHcaProblem("mlx5_0", {}) == "this host has no InfiniBand device");
  auto checks = SocketInterfaceChecks({{"NCCL_IB_HCA", "rocep200s0f0:1"}}, Host(), devices);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].status == CheckStatus::kWarn);  // NCCL falls back to sockets: slow, not failed
  CHECK(checks[0].fix.rfind("set it to this host's devices (mlx5_0, mlx5_1, mlx5_bond_0,", 0) == 0);
  CHECK(ListIbDevices("/nonexistent").empty());
  checks = SocketInterfaceChecks({{"NCCL_IB_HCA", "mlx5_0"}}, Host(), {});  // a CPU node
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].status == CheckStatus::kOk);
  CHECK(checks[0].measured == "this host has no InfiniBand device: NCCL uses sockets");
}

TEST_CASE("this host's interfaces: loopback with 127.0.0.1") {
  const auto interfaces = ListInterfaces();
  auto lo = std::find_if(interfaces.begin(), interfaces.end(),
                         [](const NetInterface& i) { return (i.flags & IFF_LOOPBACK) != 0; });
  REQUIRE(lo != interfaces.end());
  CHECK(std::any_of(lo->addresses.begin(), lo->addresses.end(),
                    [](const NetAddress& a) { return a.text == "127.0.0.1"; }));
  CHECK_FALSE(GlooIfnameProblem(lo->name, interfaces));
  CHECK(DescribeInterfaces(interfaces).find(lo->name + " 127.0.0.1") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::env
