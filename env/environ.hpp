// An environment as an ordered name -> value map, and conversions to and
// from the process's own `environ`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::env {

using Environ = std::map<std::string, std::string>;

// A copy of this process's environment.
Environ CurrentEnviron();

// The value of `name` in `e`, if present.
std::optional<std::string> Lookup(const Environ& e, const std::string& name);

// "NAME=value" strings, in name order, for execve().
std::vector<std::string> ToEnvp(const Environ& e);

}  // namespace ddprun::env
