#include "env/environ.hpp"

extern char** environ;  // NOLINT: POSIX

namespace ddprun::env {

Environ CurrentEnviron() {
  Environ e;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string entry(*p);
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    e.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return e;
}

std::optional<std::string> Lookup(const Environ& e, const std::string& name) {
  auto it = e.find(name);
  if (it == e.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> ToEnvp(const Environ& e) {
  std::vector<std::string> out;
  out.reserve(e.size());
  for (const auto& [k, v] : e) out.push_back(k + "=" + v);
  return out;
}

}  // namespace ddprun::env
