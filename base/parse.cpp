#include "base/parse.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace ddprun {

namespace {

std::string Escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      out += hex;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool SameIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// `text` with what Python's number syntax adds taken away (Spelling::kPython);
// anything else is kept, for the parser to refuse.
std::string Plain(std::string_view text, Spelling spelling) {
  if (spelling == Spelling::kStrict) return std::string(text);
  constexpr std::string_view kBlanks = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return std::string(text);
  text = text.substr(first, text.find_last_not_of(kBlanks) - first + 1);
  if (text.size() > 1 && text[0] == '+' && (IsDigit(text[1]) || text[1] == '.')) {
    text.remove_prefix(1);
  }
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool joins_digits = text[i] == '_' && i > 0 && i + 1 < text.size() &&
                              IsDigit(text[i - 1]) && IsDigit(text[i + 1]);
    if (!joins_digits) out.push_back(text[i]);
  }
  return out;
}

}  // namespace

Status InvalidValue(std::string_view subject, std::string_view text, std::string_view accepted) {
  return InvalidArgument("invalid " + std::string(subject) + "=" + Escaped(text) + ": " +
                         std::string(accepted));
}

StatusOr<long long> ParseInteger(std::string_view subject, std::string_view text, long long lo,
                                 long long hi, std::string_view accepted, Spelling spelling) {
  const std::string plain = Plain(text, spelling);
  long long n = 0;
  const char* end = plain.data() + plain.size();
  auto [ptr, ec] = std::from_chars(plain.data(), end, n);
  if (plain.empty() || ec != std::errc() || ptr != end || n < lo || n > hi) {
    return InvalidValue(subject, text, accepted);
  }
  return n;
}

StatusOr<Seconds> ParseSeconds(std::string_view subject, std::string_view text, bool allow_zero,
                               Spelling spelling) {
  const std::string plain = Plain(text, spelling);
  double d = 0;
  const char* end = plain.data() + plain.size();
  auto [ptr, ec] = std::from_chars(plain.data(), end, d, std::chars_format::general);
  const bool in_range =
      std::isfinite(d) && d >= 0 && (allow_zero || d > 0) && d <= kMaxSeconds.count();
  if (plain.empty() || ec != std::errc() || ptr != end || !in_range) {
    return InvalidValue(
        subject, text,
        std::string(allow_zero ? "a number of seconds >= 0" : "a number of seconds > 0") +
            " and at most 1e9, such as 30 or 0.5");
  }
  return Seconds(d);
}

StatusOr<size_t> ParseChoice(std::string_view subject, std::string_view text,
                             const std::vector<std::string_view>& choices, bool ignore_case) {
  std::string listed;
  size_t i = 0;
  for (std::string_view choice : choices) {
    if (ignore_case ? SameIgnoringCase(text, choice) : text == choice) return i;
    ++i;
    listed += std::string(listed.empty() ? "" : (i == choices.size() ? " or " : ", ")) +
              std::string(choice);
  }
  return InvalidValue(subject, text, listed);
}

Status CheckName(std::string_view subject, std::string_view text, size_t max_length) {
  bool ok = !text.empty() && text.size() <= max_length && text[0] != '.';
  for (char c : text) ok = ok && IsNameChar(c);
  if (ok) return Status::Ok();
  return InvalidValue(subject, text,
                      "1 to " + std::to_string(max_length) +
                          " characters from A-Z, a-z, 0-9, '.', '_' and '-', not starting "
                          "with '.'");
}

std::string Trimmed(std::string_view text) {
  const size_t b = text.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  return std::string(text.substr(b, text.find_last_not_of(" \t") - b + 1));
}

}  // namespace ddprun
