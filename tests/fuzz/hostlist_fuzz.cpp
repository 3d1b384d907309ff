// libFuzzer harness for the Slurm hostlist parser (env/hostlist.cpp).
//
// Runs ExpandHostlist on the input and checks, beyond "no crash, no sanitizer
// report", that its output stays bounded and well formed:
//   - an error is kInvalidArgument with a message, and has no hosts;
//   - at most kMaxHostlistHosts hosts, each 1..kMaxHostNameLength characters,
//     none holding a bracket or a separator;
//   - FirstHost agrees with the first host, or fails where the list is empty;
//   - a list of plain names re-joined with commas expands to itself.
// Build: cmake -DDDPRUN_FUZZ=ON with clang (see scripts/fuzz.sh), then run
// build-fuzz/tests/hostlist_fuzz -max_total_time=60.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "env/hostlist.hpp"

namespace ddprun::env {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "hostlist_fuzz: property violated: %s\n", what);
    abort();
  }
}

void FuzzOne(std::string_view input) {
  auto hosts = ExpandHostlist(input);
  auto first = FirstHost(input);
  if (!hosts.ok()) {
    Check(hosts.status().code() == StatusCode::kInvalidArgument, "errors are kInvalidArgument");
    Check(!hosts.status().message().empty(), "an error has a message");
    Check(!first.ok(), "FirstHost fails where ExpandHostlist does");
    return;
  }
  Check(hosts->size() <= kMaxHostlistHosts, "at most kMaxHostlistHosts hosts");
  std::string joined;
  for (const std::string& h : *hosts) {
    Check(!h.empty() && h.size() <= kMaxHostNameLength, "host names are 1..255 characters");
    Check(h.find_first_of("[], \t\n") == std::string::npos, "no bracket or separator in a name");
    joined += h + ",";
  }
  Check(first.ok() == !hosts->empty(), "FirstHost fails exactly when the list is empty");
  if (first.ok()) Check(*first == hosts->front(), "FirstHost is the first host");
  auto again = ExpandHostlist(joined);
  Check(again.ok() && *again == *hosts, "the expanded names, re-joined, expand to themselves");
}

}  // namespace
}  // namespace ddprun::env

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ddprun::env::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
