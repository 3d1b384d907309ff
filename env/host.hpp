// Facts about this host that the launcher needs before spawning: names,
// visible GPUs (the CPUs are env/cpus.hpp).
#pragma once

#include <optional>
#include <string>

namespace ddprun::env {

// gethostname(), or "localhost" if that fails.
std::string Hostname();

// The fully qualified name as Python's socket.getfqdn() gives it: the
// canonical name of the host name, else the host name itself.
std::string Fqdn();

// NVIDIA GPUs the CUDA runtime would enumerate: the devices the driver lists
// under `proc_root`/driver/nvidia/gpus, narrowed by `cuda_visible_devices`
// the way CUDA reads it (stops at the first entry that names no device).
int GpuCount(const std::optional<std::string>& cuda_visible_devices,
             const std::string& proc_root = "/proc");

}  // namespace ddprun::env
