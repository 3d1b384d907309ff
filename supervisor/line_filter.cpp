#include "supervisor/line_filter.hpp"

#include <algorithm>

namespace ddprun::supervisor {

LineFilter::LineFilter(std::vector<std::string> needles, std::string prefix, size_t hold_limit)
    : needles_(std::move(needles)), prefix_(std::move(prefix)), hold_limit_(hold_limit) {
  for (const auto& n : needles_) longest_ = std::max(longest_, n.size());
}

bool LineFilter::Matches(size_t from) const {
  const std::string_view held(held_);
  return std::any_of(needles_.begin(), needles_.end(),
                     [&](const std::string& n) { return held.find(n, from) != held.npos; });
}

void LineFilter::Take(std::string_view piece, std::string& out) {
  const bool ends = !piece.empty() && piece.back() == '\n';
  if (ends && held_.empty() && !matched_) {
    // The common case, a whole line: matched where it is, not copied first.
    const bool found = std::any_of(needles_.begin(), needles_.end(), [&](const std::string& n) {
      return piece.find(n) != std::string_view::npos;
    });
    if (found) out.append(prefix_).append(piece);
    return;
  }
  if (matched_) {
    out.append(piece);
  } else {
    // Only the new bytes and the last needle-size-less-one before them can
    // hold a match not seen yet.
    const size_t from = held_.size() > longest_ ? held_.size() - longest_ + 1 : 0;
    held_.append(piece);
    if (Matches(from)) {
      matched_ = true;
      out += prefix_;
      if (dropped_ > 0) {
        out += "[ddprun: the first " + std::to_string(dropped_) +
               " bytes of this line are not copied: a line is held only to " +
               std::to_string(hold_limit_) + " bytes until it matches] ";
      }
      out += held_;
      held_.clear();
    } else if (held_.size() > hold_limit_) {
      const size_t keep = std::min(held_.size(), longest_);
      dropped_ += held_.size() - keep;
      held_.erase(0, held_.size() - keep);
    }
  }
  if (ends) EndLine();
}

void LineFilter::EndLine() {
  held_.clear();
  if (held_.capacity() > kKeptCapacity) held_.shrink_to_fit();  // a long line's buffer goes
  dropped_ = 0;
  matched_ = false;
}

}  // namespace ddprun::supervisor
