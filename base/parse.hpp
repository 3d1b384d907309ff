// Parsing the values users give ddprun: options, --rdzv_conf keys and
// environment variables. One strict grammar for every number, so that
// "nan", "inf", "2.5" where a count is wanted, " 3", "+3", "0x10" and "3s"
// are refused alike, and one form of error that names the subject and the
// value as given and says what is accepted:
//   invalid --shutdown_timeout=nan: a number of seconds >= 0
//
// `subject` is what the user wrote the value for: "--max_restarts",
// "--rdzv_conf keep_alive_max_attempt", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT".
// Every error is kInvalidArgument (a usage error, exit 2 at the CLI).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.hpp"

namespace ddprun {

using Seconds = std::chrono::duration<double>;

// The longest duration any option takes: about 31 years.
inline constexpr Seconds kMaxSeconds{1e9};

// "invalid <subject>=<text>: <accepted>", with control characters in `text`
// shown escaped ("a\nb").
Status InvalidValue(std::string_view subject, std::string_view text, std::string_view accepted);

// How a number may be written. kStrict: digits with an optional leading '-'
// (and a fraction or exponent for seconds), nothing else. kPython: also as
// Python's int() and float() read it, which is how torchrun reads its options
// and rendezvous settings: blanks around it, a leading '+', and '_' between
// two digits ("1_024").
enum class Spelling { kStrict, kPython };

// A decimal integer in [lo, hi]. The error quotes `text` and says `accepted`.
StatusOr<long long> ParseInteger(std::string_view subject, std::string_view text, long long lo,
                                 long long hi, std::string_view accepted,
                                 Spelling spelling = Spelling::kStrict);

// A finite decimal number of seconds ("30", "0.5", "1e3"), at most
// kMaxSeconds, > 0 or (with `allow_zero`) >= 0.
StatusOr<Seconds> ParseSeconds(std::string_view subject, std::string_view text, bool allow_zero,
                               Spelling spelling = Spelling::kStrict);

// The index of the entry of `choices` that `text` is, compared exactly, or
// ignoring ASCII case with `ignore_case`. The error lists the choices.
StatusOr<size_t> ParseChoice(std::string_view subject, std::string_view text,
                             const std::vector<std::string_view>& choices,
                             bool ignore_case = false);

// A name that becomes part of a path, a log prefix or a store key (a run id,
// a role): 1 to `max_length` characters from [A-Za-z0-9._-], not starting
// with '.'.
Status CheckName(std::string_view subject, std::string_view text, size_t max_length);

// `text` without its leading and trailing blanks (spaces and tabs), as
// Python's str.strip() leaves a list entry or a key torchrun reads.
std::string Trimmed(std::string_view text);

}  // namespace ddprun
