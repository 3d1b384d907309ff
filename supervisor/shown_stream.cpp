#include "supervisor/shown_stream.hpp"

#include <algorithm>

namespace ddprun::supervisor {

ShownStream::~ShownStream() {
  if (turn_ != nullptr && turn_->mid_line == this) turn_->mid_line = nullptr;
}

void ShownStream::Line(std::string_view line, std::string& out) {
  // A line longer than the splitter's bound comes in pieces (only the last
  // ends in '\n'): a piece may be shorter than what was shown of it.
  const size_t body = line.empty() || line.back() != '\n' ? line.size() : line.size() - 1;
  const size_t skip = std::min(shown_, body);
  shown_ -= skip;
  Show(line.substr(skip), out);
}

void ShownStream::Partial(std::string_view pending, std::string& out) {
  if (!Unshown(pending)) return;
  Show(pending.substr(shown_), out);
  shown_ = pending.size();
}

void ShownStream::Show(std::string_view text, std::string& out) {
  if (text.empty()) return;
  if (turn_ != nullptr) {
    ShownStream* other = turn_->mid_line;
    if (turn_->launcher_breaks != nullptr) {
      const uint64_t breaks = turn_->launcher_breaks->load(std::memory_order_relaxed);
      if (breaks != turn_->breaks_seen && other != nullptr) {
        other->at_ = At::kBroken;  // a line of the launcher's ended it
        other = turn_->mid_line = nullptr;
      }
      turn_->breaks_seen = breaks;
    }
    if (other != nullptr && other != this) {
      out.push_back('\n');  // the other stream's unfinished line ends here, on the console
      other->at_ = At::kBroken;
    }
  }
  Render(text, out);
  if (turn_ != nullptr) turn_->mid_line = at_ == At::kLineStart ? nullptr : this;
}

// `text` holds at most one '\n', at its end (a line's rest, or part of one).
void ShownStream::Render(std::string_view text, std::string& out) {
  if (at_ == At::kBroken) {
    if (text.front() == '\n') text.remove_prefix(1);
    at_ = At::kLineStart;
    if (text.empty()) return;
  }
  // The prefix goes before a line's first byte, a carriage return too (a
  // "\r\n" line is the rank's: attack 86); after a carriage return, before the
  // first byte that is not a line end, so that a redrawn bar keeps it.
  auto starts_line = [this](char c) {
    return at_ == At::kLineStart || (at_ == At::kAfterReturn && c != '\r' && c != '\n');
  };
  if (prefix_.empty() || text.find('\r') == std::string_view::npos) {  // most lines: no '\r'
    if (starts_line(text.front())) out.append(prefix_);
    out.append(text);
  } else {
    for (char c : text) {
      if (starts_line(c)) out.append(prefix_);
      out.push_back(c);
      at_ = c == '\n' ? At::kLineStart : c == '\r' ? At::kAfterReturn : At::kInLine;
    }
  }
  const char last = text.back();
  at_ = last == '\n' ? At::kLineStart : last == '\r' ? At::kAfterReturn : At::kInLine;
}

}  // namespace ddprun::supervisor
