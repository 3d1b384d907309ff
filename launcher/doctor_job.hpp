// The doctor's checks of the job itself, as its launch would meet them: its
// options, the program each worker runs, the directory its logs go to, and
// the CPUs each local rank is bound to.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/environ.hpp"
#include "env/limits.hpp"
#include "launcher/launch_config.hpp"

namespace ddprun::launcher {

// The job's program (ddprun --doctor ./train ...), resolved as the launch
// resolves it: what each worker would run, or why it cannot start (fail).
env::LimitCheck ProgramCheck(const LaunchConfig& config, const env::Environ& environ);

// Where the run's logs would go (--log_dir, else a temporary directory
// under TMPDIR or /tmp): fail where the launch could not make its run
// directory there, warn where its filesystem has little space left. A
// --log_dir not made yet is made to try; anything made is removed.
env::LimitCheck LogDirectoryCheck(const std::string& log_dir);

// What the launch would warn of in the options themselves (an option given
// twice, an unknown --rdzv_conf key, more workers than GPUs, ...), minus
// what another check says (`said_elsewhere`): warn, else ok.
env::LimitCheck OptionsCheck(const std::vector<std::string>& warnings,
                             const std::vector<std::string>& said_elsewhere);

// --numa_binding / --cpu_binding, planned as the launch plans them: fail
// where the launch would refuse the plan, warn where ranks share CPUs;
// nullopt without a binding.
std::optional<env::LimitCheck> BindingCheck(const LaunchConfig& config);

}  // namespace ddprun::launcher
