#include "launcher/raw_options.hpp"

#include "env/worker_env.hpp"

namespace ddprun::launcher {

Status Bad(const std::string& option, const std::string& value, const std::string& accepted) {
  return InvalidValue("--" + option, value, accepted);
}

StatusOr<long long> ParseInt(const std::string& option, const std::string& v, long long lo,
                             long long hi, const std::string& accepted) {
  return ParseInteger("--" + option, v, lo, hi, accepted, Spelling::kPython);
}

StatusOr<size_t> ParseWord(const std::string& option, const std::string& v) {
  return ParseChoice("--" + option, v, ValueWords(*RawOptions::Find(option)));
}

Status ParseNnodes(const std::string& v, LaunchConfig& c) {
  auto parts = env::SplitList(v, ':');
  const std::string accepted = "N or MIN:MAX with 0 < MIN <= MAX <= 1048576";
  if (parts.empty() || parts.size() > 2) return Bad("nnodes", v, accepted);
  // Each part is checked alone, but the message quotes the value as given.
  auto lo = ParseInt("nnodes", parts[0], 1, 1 << 20, accepted);
  if (!lo.ok()) return Bad("nnodes", v, accepted);
  auto hi = parts.size() == 2 ? ParseInt("nnodes", parts[1], 1, 1 << 20, accepted) : lo;
  if (!hi.ok()) return Bad("nnodes", v, accepted);
  if (*lo > *hi) return Bad("nnodes", v, "MIN must not exceed MAX (" + accepted + ")");
  c.nnodes_min = static_cast<int>(*lo);
  c.nnodes_max = static_cast<int>(*hi);
  return Status::Ok();
}

}  // namespace ddprun::launcher
