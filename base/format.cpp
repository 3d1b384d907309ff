#include "base/format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

namespace ddprun {

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string FormatSeconds(double seconds) {
  char buf[32];
  const double tenths = std::round(seconds * 10) / 10;
  if (tenths == 0 && seconds > 0) {
    // Under 0.05 s: two significant digits (0.012, 0.04), never "0", which reads as "no limit".
    std::snprintf(buf, sizeof(buf), "%.2g", seconds);
  } else {
    std::snprintf(buf, sizeof(buf), "%g", tenths);
  }
  return buf;
}

namespace {

// The length of the UTF-8 character at text[i], or 0 when it is none (a
// stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut).
size_t Utf8Length(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = at(i);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > text.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  }
  return n;
}

void AppendHex(unsigned char c, std::string& out) {
  char hex[8];
  std::snprintf(hex, sizeof(hex), "\\x%02x", c);
  out += hex;
}

}  // namespace

std::string Printable(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = Utf8Length(text, i);
    if (i + std::max<size_t>(n, 1) > max_bytes) break;
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = n == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0;
    if (n == 0 || c1 || (n == 1 && ((c < 0x20 && c != '\t') || c == 0x7f))) {
      for (size_t k = 0; k < std::max<size_t>(n, 1); ++k) {
        AppendHex(static_cast<unsigned char>(text[i + k]), out);
      }
    } else {
      out.append(text.substr(i, n));
    }
    i += std::max<size_t>(n, 1);
  }
  if (i < text.size()) out += "...";
  return out;
}

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::string RanksNoun(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + JoinRanks(ranks);
}

}  // namespace ddprun
