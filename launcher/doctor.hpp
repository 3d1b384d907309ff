// ddprun doctor: what this host offers a job, as a table. The limit checks
// of env/limits.hpp (as the launch would see them, without changing any
// limit), the GPUs seen and CUDA_VISIBLE_DEVICES, the NCCL and CUDA versions
// found, the network interfaces and whether the default ports are free. Each
// line is marked ok, warn or fail, with the fix.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/environ.hpp"
#include "env/limits.hpp"
#include "launcher/options.hpp"

namespace ddprun::launcher {

// The launcher options of a doctor request, `ddprun doctor [options]` or
// `ddprun [options] --doctor [...]`, without the request itself; nullopt
// when `args` (argv without argv[0]) asks for something else.
std::optional<std::vector<std::string>> DoctorArguments(const std::vector<std::string>& args);

// Whether a doctor request's `options` ask only to print something and exit
// (--help, --version, --print_completion): those win, as everywhere else.
bool DoctorOnlyPrints(const std::vector<std::string>& options);

struct DoctorReport {
  std::string host;
  int nproc_per_node = 1;
  int threads_per_worker = 1;
  std::vector<env::LimitCheck> checks;
  std::string text;  // the table, ready to print
  bool failed = false;
};

// Runs every check for a job shaped by `options` (e.g. --nproc_per_node),
// its program too when one is given (ddprun --doctor ./train ...), and the
// directory its logs would go to. Fails with kInvalidArgument when the
// options do not parse.
StatusOr<DoctorReport> RunDoctor(const std::vector<std::string>& options,
                                 const env::Environ& environ, const HostCounts& host);

// The table: a `#` header, one line per check (mark, check, measured), a
// `fix:` line under each that is not ok, and a footer ending OK or FAILED.
std::string FormatDoctorTable(const std::string& header,
                              const std::vector<env::LimitCheck>& checks);

}  // namespace ddprun::launcher
