#include "env/hostlist.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace ddprun::env {
namespace {

using Hosts = std::vector<std::string>;

Hosts Expanded(std::string_view expr) {
  auto hosts = ExpandHostlist(expr);
  REQUIRE_MESSAGE(hosts.ok(), hosts.status().message());
  return *hosts;
}

std::string ErrorOf(std::string_view expr) {
  auto hosts = ExpandHostlist(expr);
  REQUIRE_FALSE(hosts.ok());
  CHECK(hosts.status().code() == StatusCode::kInvalidArgument);
  return hosts.status().message();
}

TEST_CASE("a hostlist of plain names gives them in order, digits and dashes untouched") {
  CHECK(Expanded("node1") == Hosts{"node1"});
  CHECK(Expanded("login-01,gpu7,a.b.c") == Hosts{"login-01", "gpu7", "a.b.c"});
}

TEST_CASE("a hostlist range keeps the lower bound's zero padding") {
  CHECK(Expanded("n[01-04,07]") == Hosts{"n01", "n02", "n03", "n04", "n07"});
  CHECK(Expanded("n[1-3]") == Hosts{"n1", "n2", "n3"});
  CHECK(Expanded("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});
  // Slurm: width = strlen(lo); numbers wider than it print in full.
  CHECK(Expanded("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(Expanded("n[9-010]") == Hosts{"n9", "n10"});
  CHECK(Expanded("n[007]") == Hosts{"n007"});
}

TEST_CASE("several bracket groups expand as a product, the first group slowest") {
  CHECK(Expanded("rack[1-2]-n[01-02]") ==
        Hosts{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"});
  CHECK(Expanded("r[1,3]s[0-1].x") == Hosts{"r1s0.x", "r1s1.x", "r3s0.x", "r3s1.x"});
  CHECK(Expanded("[1-2]") == Hosts{"1", "2"});
}

TEST_CASE("a hostlist's top-level commas separate expressions, commas in brackets do not") {
  CHECK(Expanded("a[1-2],b,c[05,7-8]") == Hosts{"a1", "a2", "b", "c05", "c7", "c8"});
  // Slurm also separates at whitespace and skips empty expressions.
  CHECK(Expanded("a, b\tc\n,,d") == Hosts{"a", "b", "c", "d"});
  CHECK(Expanded("").empty());
  CHECK(Expanded(" , ").empty());
  // Duplicates stay, as in `scontrol show hostnames`.
  CHECK(Expanded("n[1-2],n1") == Hosts{"n1", "n2", "n1"});
}

TEST_CASE("a hostlist with unbalanced or nested brackets is refused naming the expression") {
  CHECK(ErrorOf("n[1-2") ==
        "hostlist 'n[1-2': '[' without ']'; write hosts as name[lo-hi,n,...], e.g. "
        "node[01-04,07]");
  CHECK(ErrorOf("n1-2]").find("']' without '[' at offset 4") != std::string::npos);
  CHECK(ErrorOf("n[[1]]").find("nested '[' at offset 2") != std::string::npos);
  CHECK(ErrorOf("a,n[1,b").find("'[' without ']'") != std::string::npos);
}

TEST_CASE("a hostlist with an empty range or bracket is refused") {
  CHECK(ErrorOf("n[]").find("empty brackets '[]'") != std::string::npos);
  CHECK(ErrorOf("n[1,,2]").find("empty range in '[1,,2]'") != std::string::npos);
  CHECK(ErrorOf("n[1,]").find("empty range") != std::string::npos);
  // Slurm reads "5-" as 5; we refuse the missing bound.
  CHECK(ErrorOf("n[5-]").find("empty number") != std::string::npos);
  CHECK(ErrorOf("n[-5]").find("empty number") != std::string::npos);
}

TEST_CASE("a hostlist with a reversed range or non-digits in brackets is refused") {
  CHECK(ErrorOf("n[5-3]").find("reversed range '5-3'") != std::string::npos);
  CHECK(ErrorOf("n[a-c]").find("'a' is not a number") != std::string::npos);
  CHECK(ErrorOf("n[1--3]").find("'-3' is not a number") != std::string::npos);
  CHECK(ErrorOf("n[1-2-3]").find("'2-3' is not a number") != std::string::npos);
  CHECK(ErrorOf("n[ 1]").find("is not a number") != std::string::npos);
  CHECK(ErrorOf("n[1234567890123456789]").find("more than 18 digits") != std::string::npos);
}

TEST_CASE("a hostlist expanding past the host bound is refused before expanding") {
  CHECK(ExpandHostlist("n[1-65536]")->size() == kMaxHostlistHosts);
  CHECK(ErrorOf("n[0-999999999]").find("more than 65536 hosts") != std::string::npos);
  CHECK(ErrorOf("n[0-65536]").find("more than 65536 hosts") != std::string::npos);
  CHECK(ErrorOf("a[0-999]b[0-999]").find("more than 65536 hosts") != std::string::npos);
  CHECK(ErrorOf("a[1-40000],b[1-40000]").find("more than 65536 hosts") != std::string::npos);
  CHECK(ErrorOf("a[0-999999999999999999]").find("more than 65536") != std::string::npos);
}

TEST_CASE("a hostlist naming a host longer than 255 characters is refused") {
  const std::string long_name(250, 'x');
  CHECK(Expanded(long_name + "[1-9]").size() == 9);
  CHECK(ErrorOf(long_name + "[100000-100009]").find("longer than 255") != std::string::npos);
  // The message quotes at most 80 characters of the expression.
  CHECK(ErrorOf(std::string(300, 'y')).find(std::string(80, 'y') + "...") != std::string::npos);
}

TEST_CASE("FirstHost gives the first host of a valid hostlist, an error for an empty one") {
  CHECK(FirstHost("rack[2-3]-n[07-08],login").value() == "rack2-n07");
  CHECK(FirstHost("gpu01").value() == "gpu01");
  CHECK(FirstHost(",").status().message().find("no host") != std::string::npos);
  CHECK_FALSE(FirstHost("n[1-2],m[3").ok());
}

}  // namespace
}  // namespace ddprun::env
