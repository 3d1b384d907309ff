// The values of single options (and PET_ variables) as torchrun reads them,
// each refused with a message that names the option, the value and what is
// accepted (launcher/options.cpp applies them to a LaunchConfig).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/visible_gpus.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/options.hpp"

namespace ddprun::launcher {

// The longest run id or role: both become parts of paths, store keys and log prefixes.
inline constexpr size_t kMaxNameLength = 128;

// 1/true/yes/on, 0/false/no/off or empty, or any whole number (bool(int(v))).
StatusOr<bool> ParseBool(const std::string& option, const std::string& v);
// --nproc_per_node: a number, cpu, gpu or auto; `gpus`: those the workers will see.
StatusOr<int> ParseNproc(const std::string& v, const HostCounts& host,
                         const env::VisibleGpus& gpus);
// --redirects/--tee: a value for all, or local_rank:value pairs below `nproc`.
StatusOr<StreamSelection> ParseStreams(const std::string& option, const std::string& v, int nproc);
// Comma list where ",," stands for a literal comma.
std::vector<std::string> ParseFilters(const std::string& v);
// --rdzv_conf's key=value pairs, trimmed as torchrun trims them; `repeated`, when given, gets
// a warning for each key given twice with two values (the last is used, as torchrun does).
StatusOr<std::map<std::string, std::string>> ParseRdzvConf(
    const std::string& given, std::vector<std::string>* repeated = nullptr);
// --signals_to_handle into c.handled_signals (names trimmed, as torchrun's).
Status ParseSignals(const std::string& v, LaunchConfig& c);
// The syntax of --gpus; env::ResolveVisibleGpus checks it against the host.
Status ParseGpus(const std::string& v);
// HOST, HOST:PORT, [IPV6]:PORT or a bare IPv6 address, as the agent will read it.
Status CheckEndpoint(const std::string& v);
// A random run id in the UUID 4 form, for --rdzv_id when none is given.
std::string NewRunId();

}  // namespace ddprun::launcher
