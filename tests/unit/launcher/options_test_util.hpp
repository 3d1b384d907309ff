// The helpers the launcher's option tests share: a host, and parsing a command line.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "launcher/options.hpp"

namespace ddprun::launcher::test {

inline const HostCounts kHost{16, {}};

// `cpus` CPUs and `gpus` GPUs that NVML lists (GPU-<i>, bus 0000:<10+i>:00.0).
inline HostCounts Host(int cpus, int gpus) {
  HostCounts host{cpus, {}};
  host.gpus.source = env::GpuSource::kNvml;
  for (int i = 0; i < gpus; ++i) {
    env::GpuDevice g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.pci_bus_id = "0000:" + std::to_string(10 + i) + ":00.0";
    host.gpus.devices.push_back(g);
  }
  return host;
}

inline StatusOr<ParsedCommandLine> Parse(const std::vector<std::string>& args,
                                         const env::Environ& environ = {},
                                         const HostCounts& host = kHost) {
  return ParseCommandLine(args, environ, host);
}

inline std::string Error(const std::vector<std::string>& args, const env::Environ& environ = {}) {
  auto p = Parse(args, environ);
  REQUIRE_FALSE(p.ok());
  return p.status().message();
}

inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace ddprun::launcher::test
