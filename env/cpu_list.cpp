#include "env/cpu_list.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>

namespace ddprun::env {
namespace {

// The highest CPU number accepted: far above any machine, low enough that a
// range cannot exhaust memory.
constexpr int kMaxCpu = 1 << 20;

std::optional<int> CpuNumber(std::string_view s) {
  int n = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || n < 0 || n > kMaxCpu) {
    return std::nullopt;
  }
  return n;
}

}  // namespace

std::optional<CpuList> ParseCpuList(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  CpuList cpus;
  if (text.empty()) return cpus;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t dash = item.find('-');
    auto lo = CpuNumber(item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : CpuNumber(item.substr(dash + 1));
    if (!lo || !hi || *lo > *hi) return std::nullopt;
    for (int c = *lo; c <= *hi; ++c) cpus.push_back(c);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const CpuList& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

CpuList Intersect(const CpuList& a, const CpuList& b) {
  CpuList out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace ddprun::env
