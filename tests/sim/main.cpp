// elastic_sim [--seeds K] [--first S] [--seed N] [--trace]: runs seeds of the
// simulation (sim.hpp); one line per failing seed and a footer; exit 1 when
// any failed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "tests/sim/sim.hpp"

int main(int argc, char** argv) {
  uint64_t first = 1, seeds = 1000;
  std::optional<uint64_t> one;
  bool trace = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> uint64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "elastic_sim: %s needs a number\n", arg.c_str());
        std::exit(2);
      }
      return std::strtoull(argv[++i], nullptr, 10);
    };
    if (arg == "--seeds") {
      seeds = next();
    } else if (arg == "--first") {
      first = next();
    } else if (arg == "--seed") {
      one = next();
    } else if (arg == "--trace") {
      trace = true;
    } else {
      std::fprintf(stderr, "usage: elastic_sim [--seeds K] [--first S] [--seed N] [--trace]\n");
      return 2;
    }
  }
  if (one) {
    first = *one;
    seeds = 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t failed = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    ddprun::rendezvous::sim::Sim sim(seed, trace);
    std::string violation = sim.Run();
    if (trace || !violation.empty()) std::printf("%s\n", sim.Summary().c_str());
    if (!violation.empty()) {
      ++failed;
      std::printf("FAILED seed %llu: %s (rerun: elastic_sim --seed %llu --trace)\n",
                  static_cast<unsigned long long>(seed), violation.c_str(),
                  static_cast<unsigned long long>(seed));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("# elastic_sim: seeds %llu..%llu in %.2f s (%.0f seeds/s)\n",
              static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(first + seeds - 1), secs, seeds / secs);
  std::printf("%llu passed, %llu failed\n", static_cast<unsigned long long>(seeds - failed),
              static_cast<unsigned long long>(failed));
  return failed == 0 ? 0 : 1;
}
