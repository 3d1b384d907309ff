// The smallest ddprun worker: reads the launcher's environment contract,
// does a little work on its own shard, and reports.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "env/names.hpp"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

int main() {
  namespace env = ddprun::env;
  const std::string rank = Env(env::kRank);
  const std::string world = Env(env::kWorldSize);
  if (rank.empty() || world.empty()) {
    std::fprintf(stderr,
                 "hello_worker: RANK and WORLD_SIZE are not set: run it under ddprun, e.g. "
                 "ddprun --nproc_per_node=4 hello_worker\n");
    return 2;
  }
  const long r = std::stol(rank), n = std::stol(world);
  double shard_sum = 0;  // this rank's shard of 1..1e6
  for (long i = 1 + r; i <= 1000000; i += n) shard_sum += static_cast<double>(i);
  std::printf("rank %s of %s (local rank %s) MASTER_ADDR=%s MASTER_PORT=%s shard sum %.0f\n",
              rank.c_str(), world.c_str(), Env(env::kLocalRank).c_str(),
              Env(env::kMasterAddr).c_str(), Env(env::kMasterPort).c_str(), shard_sum);
  return 0;
}
