#include "ddp/nonfinite.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>

namespace ddprun::ddp {
namespace {

// The names after the first few, counted.
constexpr size_t kNamesShown = 3;

}  // namespace

bool GradFinite(const Parameter& p) {
  const size_t n = p.numel();
  if (p.dtype == DType::kFloat32) {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(p.grad[i])) return false;
    }
    return true;
  }
  // 16 bits: all exponent bits set is inf or NaN.
  const uint16_t exponent = p.dtype == DType::kFloat16 ? 0x7c00u : 0x7f80u;
  const uint16_t* g = p.grad16();
  for (size_t i = 0; i < n; ++i) {
    if ((g[i] & exponent) == exponent) return false;
  }
  return true;
}

StatusOr<std::string> GatherNonFiniteOrigin(ProcessGroup& group,
                                            const std::vector<std::string>& mine) {
  std::string joined;
  for (const std::string& name : mine) joined += name + "\n";
  auto all = group.AllGatherStrings(joined);
  if (!all.ok()) return all.status().Annotate("ddp: gathering where inf/NaN gradients came from");
  std::string origin;
  for (size_t r = 0; r < all->size(); ++r) {
    std::istringstream in((*all)[r]);
    std::string names;
    size_t count = 0;
    for (std::string name; std::getline(in, name); ++count) {
      if (count < kNamesShown) names += (count == 0 ? "" : ", ") + name;
    }
    if (count == 0) continue;
    if (count > kNamesShown) names += " and " + std::to_string(count - kNamesShown) + " more";
    origin += (origin.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " (" + names + ")");
  }
  return origin;
}

}  // namespace ddprun::ddp
