#include "env/hostlist.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace ddprun::env {
namespace {

// Slurm reads numbers with strtoul; 18 digits always fit in 64 bits.
constexpr size_t kMaxDigits = 18;
// The expression as quoted in messages: long inputs are cut.
constexpr size_t kQuoteLength = 80;

struct Range {
  uint64_t lo = 0;
  uint64_t hi = 0;
  size_t width = 0;  // the lower bound's digits, leading zeros included
};

// One bracket group; `size` (its numbers) is at most kMaxHostlistHosts.
struct Group {
  std::vector<Range> ranges;
  size_t size = 0;
};

struct Pattern {
  std::vector<std::string> texts;
  std::vector<Group> groups;
};

Status Invalid(std::string_view expr, const std::string& what) {
  std::string quoted(expr.substr(0, kQuoteLength));
  if (expr.size() > kQuoteLength) quoted += "...";
  return InvalidArgument("hostlist '" + quoted + "': " + what +
                         "; write hosts as name[lo-hi,n,...], e.g. node[01-04,07]");
}

bool IsSeparator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Splits `expr` at separators outside brackets, skipping empty pieces (as
// Slurm does: "a,,b" is a and b). Brackets must pair and must not nest.
StatusOr<std::vector<std::string_view>> SplitTopLevel(std::string_view expr) {
  std::vector<std::string_view> pieces;
  bool open = false;
  size_t start = 0;
  for (size_t i = 0; i <= expr.size(); ++i) {
    const char c = i < expr.size() ? expr[i] : ',';
    if (c == '[' && open) return Invalid(expr, "nested '[' at offset " + std::to_string(i));
    if (c == ']' && !open) return Invalid(expr, "']' without '[' at offset " + std::to_string(i));
    if (c == '[' || c == ']') open = (c == '[');
    if (open || !IsSeparator(c)) continue;
    if (i > start) pieces.push_back(expr.substr(start, i - start));
    start = i + 1;
  }
  if (open) return Invalid(expr, "'[' without ']'");
  return pieces;
}

StatusOr<uint64_t> ParseNumber(std::string_view expr, std::string_view digits) {
  if (digits.empty()) return Invalid(expr, "empty number in a range");
  if (digits.size() > kMaxDigits) {
    return Invalid(expr, "number '" + std::string(digits) + "' has more than 18 digits");
  }
  uint64_t n = 0;
  for (char c : digits) {
    if (!IsDigit(c)) return Invalid(expr, "'" + std::string(digits) + "' is not a number");
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

std::string Padded(uint64_t n, size_t width) {
  std::string s = std::to_string(n);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Appends "lo" or "lo-hi" to `group`. The width is the lower bound's, leading
// zeros included (Slurm: range->width = strlen(lo)). Slurm reads "5-" as 5; we
// refuse an empty bound.
Status AppendRange(std::string_view expr, std::string_view item, Group* group) {
  const size_t dash = item.find('-');
  const std::string_view lo_text = item.substr(0, dash);
  auto lo = ParseNumber(expr, lo_text);
  if (!lo.ok()) return lo.status();
  auto hi = dash == std::string_view::npos ? lo : ParseNumber(expr, item.substr(dash + 1));
  if (!hi.ok()) return hi.status();
  if (*lo > *hi) return Invalid(expr, "reversed range '" + std::string(item) + "'");
  if (*hi - *lo >= kMaxHostlistHosts - group->size) {
    return Invalid(expr, "more than " + std::to_string(kMaxHostlistHosts) + " hosts");
  }
  group->ranges.push_back({*lo, *hi, lo_text.size()});
  group->size += *hi - *lo + 1;
  return Status::Ok();
}

// The numbers of the bracket contents `inside` ("01-04,07").
StatusOr<Group> ParseGroup(std::string_view expr, std::string_view inside) {
  if (inside.empty()) return Invalid(expr, "empty brackets '[]'");
  Group group;
  for (size_t start = 0; start <= inside.size();) {
    size_t comma = inside.find(',', start);
    if (comma == std::string_view::npos) comma = inside.size();
    const std::string_view item = inside.substr(start, comma - start);
    if (item.empty()) return Invalid(expr, "empty range in '[" + std::string(inside) + "]'");
    Status s = AppendRange(expr, item, &group);
    if (!s.ok()) return s;
    start = comma + 1;
  }
  return group;
}

// One expression with balanced, unnested brackets (SplitTopLevel checked).
StatusOr<Pattern> ParsePattern(std::string_view expr, std::string_view piece) {
  Pattern p;
  for (;;) {
    const size_t open = piece.find('[');
    p.texts.emplace_back(piece.substr(0, open));
    if (open == std::string_view::npos) return p;
    const size_t close = piece.find(']', open);
    auto group = ParseGroup(expr, piece.substr(open + 1, close - open - 1));
    if (!group.ok()) return group.status();
    p.groups.push_back(std::move(group).value());
    piece.remove_prefix(close + 1);
  }
}

// How many hosts `p` stands for, or kMaxHostlistHosts + 1 when more than that.
size_t HostCount(const Pattern& p) {
  size_t count = 1;
  for (const Group& g : p.groups) {
    if (count > kMaxHostlistHosts / g.size) return kMaxHostlistHosts + 1;
    count *= g.size;
  }
  return count;
}

size_t LongestName(const Pattern& p) {
  size_t length = 0;
  for (const std::string& t : p.texts) length += t.size();
  for (const Group& g : p.groups) {
    size_t widest = 0;
    for (const Range& r : g.ranges) widest = std::max(widest, Padded(r.hi, r.width).size());
    length += widest;
  }
  return length;
}

// Appends the cartesian product of `p`, the first group varying slowest: Slurm
// expands the first group and re-parses each "prefix<n>suffix" for the rest.
// REQUIRES: HostCount(p) <= kMaxHostlistHosts, which bounds the numbers
// formatted here too (each group's size is at most the product).
void Expand(const Pattern& p, std::vector<std::string>* hosts) {
  std::vector<std::vector<std::string>> numbers(p.groups.size());
  for (size_t g = 0; g < p.groups.size(); ++g) {
    for (const Range& r : p.groups[g].ranges) {
      for (uint64_t n = r.lo; n <= r.hi; ++n) numbers[g].push_back(Padded(n, r.width));
    }
  }
  std::vector<size_t> at(numbers.size(), 0);
  for (;;) {
    std::string name = p.texts[0];
    for (size_t g = 0; g < numbers.size(); ++g) name += numbers[g][at[g]] + p.texts[g + 1];
    hosts->push_back(std::move(name));
    size_t g = numbers.size();
    while (g > 0 && ++at[g - 1] == numbers[g - 1].size()) at[--g] = 0;
    if (g == 0) return;
  }
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view expr) {
  auto pieces = SplitTopLevel(expr);
  if (!pieces.ok()) return pieces.status();
  std::vector<Pattern> patterns;
  size_t total = 0;
  for (std::string_view piece : *pieces) {
    auto p = ParsePattern(expr, piece);
    if (!p.ok()) return p.status();
    total += HostCount(*p);
    if (total > kMaxHostlistHosts) {
      return Invalid(expr, "more than " + std::to_string(kMaxHostlistHosts) + " hosts");
    }
    if (LongestName(*p) > kMaxHostNameLength) {
      return Invalid(
          expr, "a host name longer than " + std::to_string(kMaxHostNameLength) + " characters");
    }
    patterns.push_back(std::move(p).value());
  }
  std::vector<std::string> hosts;
  hosts.reserve(total);
  for (const Pattern& p : patterns) Expand(p, &hosts);
  return hosts;
}

StatusOr<std::string> FirstHost(std::string_view expr) {
  auto hosts = ExpandHostlist(expr);
  if (!hosts.ok()) return hosts.status();
  if (hosts->empty()) return Invalid(expr, "no host");
  return std::move(hosts->front());
}

}  // namespace ddprun::env
