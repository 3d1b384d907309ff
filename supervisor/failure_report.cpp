#include "supervisor/failure_report.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include "base/format.hpp"
#include "base/read_file.hpp"
#include "env/core_dump.hpp"
#include "env/host.hpp"
#include "supervisor/explain.hpp"

namespace ddprun::supervisor {

using nlohmann::json;

namespace {

constexpr size_t kMaxWidth = 60;

std::string Indent(const std::string& text) {
  std::string out;
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out += "  ";
  }
  return out;
}

std::string IsoTime(long long ts) {
  std::time_t t = static_cast<std::time_t>(ts);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

std::string FormatOne(size_t idx, const std::string& host, const FailureRecord& f) {
  std::ostringstream o;
  o << "[" << idx << "]:\n"
    << "  time      : " << IsoTime(f.timestamp) << "\n"
    << "  host      : " << host << "\n"
    << "  rank      : " << f.rank << " (local_rank: " << f.local_rank << ")\n"
    << "  exitcode  : " << f.exit.TorchCode()
    << (f.pid > 0 ? " (pid: " + std::to_string(f.pid) + ") " : " (never started) ")
    << (f.exit.signal != 0 ? " (" + SignalName(f.exit.signal) + ")" : "") << "\n"
    << "  error_file: " << f.error_file << "\n"
    << "  traceback : " << Indent(f.message);
  if (f.raised_first) {
    o << "\n  note      : it raised first (its error file is the oldest), then did not exit "
         "until ddprun stopped the group (a thread that is not a daemon?)";
  }
  for (const auto& lost : f.lost_logs) o << "\n  log lost  : " << lost;
  if (!f.core.empty()) o << "\n  core dump : " << f.core;
  return o.str();
}

size_t Widest(const std::string& text) {
  size_t widest = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) widest = std::max(widest, line.size());
  return widest;
}

// The last line of `text` with something in it, at most kMaxShown bytes.
std::string LastLine(const std::string& text) {
  constexpr size_t kMaxShown = 300;
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  const size_t from = start == std::string::npos ? 0 : start + 1;
  // Shown as printed text: a terminal's escape sequences (clear the screen)
  // and bytes that are no UTF-8 as \xNN.
  return Printable(std::string_view(text).substr(from, end + 1 - from), kMaxShown);
}

// `message`, then the worker's last output line on a line of its own (the
// diagnosis reads it as the worker printed it): its last stderr line where
// its stdout went straight to the console or a file, unread.
std::string WithLastLine(std::string message, const FailureRecord& f) {
  if (const std::string last = LastLine(f.output_tail); !last.empty()) {
    message += (f.tail_has_stdout ? "\nits last output line: " : "\nits last stderr line: ") + last;
  }
  return message;
}

// What a Python worker without an error file is advised, read from how its
// output ends. @record writes the file for an Exception that leaves the entry
// point; sys.exit(), os._exit(), a KeyboardInterrupt and `python -m` not
// finding its module never reach it, and advising it there sends the user
// decorating in vain (attack 83).
std::string PythonAdvice(const std::string& tail, bool stderr_seen) {
  const std::string last = LastLine(tail);
  const std::string kRecord = "torch.distributed.elastic.multiprocessing.errors.record";
  // Nothing on a stderr ddprun read: no traceback was printed, it did not raise.
  if (last.empty() && !stderr_seen)
    return " (Python: decorate the entry point with " + kRecord + ")";
  if (last.rfind("KeyboardInterrupt", 0) == 0) {
    return " (Python: it was interrupted (KeyboardInterrupt: a SIGINT); " + kRecord +
           " does not record that)";
  }
  // A traceback: its header, or the source line of its last frame just above
  // the exception's line ("    raise ...": indented).
  std::string above, line, previous;
  std::istringstream lines(tail);
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    above = std::exchange(previous, line);
  }
  if (tail.find("Traceback (most recent call last):") != std::string::npos ||
      above.rfind("    ", 0) == 0) {
    return " (Python: decorate the entry point with " + kRecord + " to have its traceback here)";
  }
  return " (Python: it exited without raising: sys.exit(), os._exit() or the interpreter "
         "itself; " +
         kRecord + " has nothing to record then)";
}

std::string DefaultMessage(const FailureRecord& f, bool python) {
  if (f.exit.signal != 0) {
    // torchrun's words, then what the worker said last (a signal is often
    // sent by whatever it complained to, or follows its own last words).
    return WithLastLine("Signal " + std::to_string(f.exit.signal) + " (" +
                            SignalName(f.exit.signal) + ") received by PID " +
                            std::to_string(f.pid),
                        f);
  }
  std::string message = "no traceback: the worker wrote no error file";
  if (python) message += PythonAdvice(f.output_tail, f.stderr_seen);
  return WithLastLine(std::move(message), f);
}

// Where the kernel put the core of a worker whose wait status said it dumped
// one: workers run in the launcher's working directory, as its own user.
std::string CoreDumpOf(const WorkerRecord& w) {
  env::CoreOwner owner;
  owner.pid = w.pid;
  owner.uid = getuid();
  owner.gid = getgid();
  owner.signal = w.exit.signal;
  owner.host = env::Hostname();
  std::error_code ec;
  owner.cwd = std::filesystem::current_path(ec).string();
  // The dump's last write comes just before the exit; a minute of slack.
  owner.written_after = std::chrono::system_clock::to_time_t(w.exit_time) - 60;
  return env::DescribeCoreDump(env::ReadCorePattern(), owner);
}

}  // namespace

namespace {

// A worker wrote its error file, but not as PyTorch's record: what it holds,
// shown (the start of it, bytes outside printable ASCII as \xNN).
bool Unreadable(const std::string& path, const std::string& text, const std::string& why,
                FailureRecord& record, size_t size = std::string::npos) {
  constexpr size_t kShown = 300;
  record.error_file = path;
  record.message = text.empty()
                       ? "the worker's error file is empty (" + why + ")"
                       : "the worker's error file is not a record ddprun can read (" + why + ", " +
                             std::to_string(size == std::string::npos ? text.size() : size) +
                             " bytes); it begins: " + Printable(text, kShown);
  record.message = WithLastLine(std::move(record.message), record);
  return true;
}

}  // namespace

std::string WithoutLoneSurrogates(const std::string& text) {
  auto escape_at = [&](size_t i) -> long {  // the code of "\uXXXX" at i, or -1
    if (i + 6 > text.size() || text[i] != '\\' || text[i + 1] != 'u') return -1;
    long code = 0;
    for (size_t k = i + 2; k < i + 6; ++k) {
      const char c = text[k];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return -1;
      code = code * 16 + digit;
    }
    return code;
  };
  auto high = [](long c) { return c >= 0xd800 && c <= 0xdbff; };
  auto low = [](long c) { return c >= 0xdc00 && c <= 0xdfff; };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      out += text[i];
      continue;
    }
    const long code = escape_at(i);
    if (high(code) && low(escape_at(i + 6))) {  // a pair: kept
      out.append(text, i, 12);
      i += 11;
    } else if (high(code) || low(code)) {
      out += "\\ufffd";
      i += 5;
    } else {  // any other escape, the escaped character included
      out.append(text, i, 2);
      i += 1;
    }
  }
  return out;
}

std::string StrictJson(const std::string& python_json) {
  const std::string text = WithoutLoneSurrogates(python_json);
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (text.compare(i, token.size(), token) == 0) {
        out += "null";
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

bool NestsTooDeep(const std::string& text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

namespace {

// A field a worker wrote as text, whatever JSON type it used (a C++ or
// hand-written writer may put a number or a list where torchrun puts text).
std::string TextOf(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "";
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A time in seconds since the epoch, as a number or decimal text; nullopt for
// anything else (garbage must not make a failure the earliest, the root cause).
std::optional<long long> TimestampOf(const json& value) {
  constexpr double kLatest = 1e11;  // the year 5138
  double seconds = -1;
  if (value.is_number()) {
    seconds = value.get<double>();
  } else if (value.is_string()) {
    const std::string& t = value.get_ref<const std::string&>();
    if (t.empty() || t.size() > 12 ||
        !std::all_of(t.begin(), t.end(), [](unsigned char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    seconds = std::stod(t);
  }
  if (!(seconds >= 0 && seconds < kLatest)) return std::nullopt;
  return static_cast<long long>(seconds);
}

}  // namespace

bool ReadErrorFile(const std::string& path, FailureRecord& record) {
  if (path.empty()) return false;
  // Never waits: the worker may have left a named pipe there.
  const std::string text = ReadSmallFile(path, kErrorFileLimit + 1);
  if (text.size() > kErrorFileLimit) {
    struct stat st {};
    const size_t size = stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)
                            ? static_cast<size_t>(st.st_size)
                            : text.size();
    return Unreadable(path, text,
                      "larger than the " + std::to_string(kErrorFileLimit >> 20) +
                          " MiB ddprun reads of an error file: its traceback is in the file, "
                          "and in the worker's output if it printed one",
                      record, size);
  }
  if (text.empty()) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != 0) return false;
    return Unreadable(path, text,
                      "0 bytes: the worker was killed while it wrote the file, or opened it and "
                      "wrote nothing",
                      record);
  }
  if (NestsTooDeep(text)) {
    return Unreadable(path, text,
                      "JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep",
                      record);
  }
  json data = json::parse(StrictJson(text), nullptr, /*allow_exceptions=*/false);
  if (data.is_discarded()) {
    return Unreadable(path, text, "not JSON: cut off, or not UTF-8", record);
  }
  if (!data.is_object() || !data.contains("message")) {
    return Unreadable(path, text, "JSON without a \"message\"", record);
  }
  const json& msg = data["message"];
  std::optional<long long> when;
  if (msg.is_string()) {
    record.message = msg.get<std::string>();
    if (data.contains("timestamp")) when = TimestampOf(data["timestamp"]);
  } else if (msg.is_object()) {
    const json none = json::object();
    const json& extra =
        msg.contains("extraInfo") && msg["extraInfo"].is_object() ? msg["extraInfo"] : none;
    record.message = extra.contains("py_callstack") ? TextOf(extra["py_callstack"])
                     : msg.contains("message")      ? TextOf(msg["message"])
                                                    : std::string(kNotAvailable);
    if (extra.contains("timestamp")) when = TimestampOf(extra["timestamp"]);
  } else {
    return Unreadable(path, text, "its \"message\" is neither text nor an object", record);
  }
  if (when) record.timestamp = *when;  // else the time ddprun saw the exit
  record.timed_by_error_file = when.has_value();
  record.error_file = path;
  return true;
}

void FillTailsFromLogs(GroupResult& result, const std::vector<std::string>& stderr_logs) {
  constexpr std::streamoff kTail = 4096;
  for (WorkerRecord& w : result.workers) {
    const size_t lr = static_cast<size_t>(w.local_rank);
    if (!w.output_tail.empty() || lr >= stderr_logs.size()) continue;
    const std::string& path = stderr_logs[lr];
    if (path.empty() || path == "/dev/null") continue;
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) continue;
    const std::streamoff size = in.tellg();
    in.seekg(size > kTail ? size - kTail : 0);
    std::string tail(static_cast<size_t>(std::min(size, kTail)), '\0');
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    tail.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    if (size > kTail) {  // from a line start
      auto nl = tail.find('\n');
      if (nl != std::string::npos) tail.erase(0, nl + 1);
    }
    w.output_tail = std::move(tail);
    w.tail_has_stdout = false;  // the stderr log's
    w.stderr_seen = true;
  }
}

void CountOwnFailures(GroupResult& result, const std::vector<std::string>& error_files) {
  if (result.outcome != Outcome::kFailed) return;
  for (size_t i = 0; i < result.workers.size(); ++i) {
    WorkerRecord& w = result.workers[i];
    if (w.state != WorkerState::kStopped) continue;
    const size_t lr = static_cast<size_t>(w.local_rank);
    struct stat st {};
    const bool raised = lr < error_files.size() && !error_files[lr].empty() &&
                        stat(error_files[lr].c_str(), &st) == 0 && st.st_size > 0;
    const bool own_code = w.exit.signal == 0 && w.exit.code != 0 && w.exit.code < 128;
    // A signal ddprun did not send (a scheduler's SIGUSR1 to every process of the step, a
    // crash) that the worker died of while the group was being stopped: its own failure, not
    // the stop's. SIGPIPE is the stop's: it wrote to a peer that had closed; and the signal
    // that stopped the job (a terminal's SIGHUP reaches the workers too).
    const int sig = w.exit.signal;
    const bool own_signal = sig != 0 && sig != SIGKILL && sig != SIGPIPE &&
                            sig != result.received_signal && result.signals_sent.count(sig) == 0;
    if (!raised && !own_code && !own_signal) continue;
    w.state = WorkerState::kFailed;
    w.failed_while_stopping = true;
    result.failures.push_back(i);
  }
}

bool DiedOfPeer(const FailureRecord& f) {
  if (f.exit.signal == SIGPIPE) return true;
  // Its last lines too: a worker that wrote no error file still said why.
  const std::string_view tail =
      std::string_view(f.output_tail)
          .substr(f.output_tail.size() > 1024 ? f.output_tail.size() - 1024 : 0);
  return LostPeerSign(f.message) || LostPeerSign(tail);
}

namespace {

// A rank found hung that had raised first (its error file, or a traceback it
// printed), kept alive by a thread that is not a daemon: the exception is
// what the user has to read, the hang only followed (attack 83).
std::string WhatAHungRankSaid(const WorkerRecord& w, const std::vector<std::string>& error_files,
                              FailureRecord& f) {
  FailureRecord raised;
  if (static_cast<size_t>(w.local_rank) < error_files.size() &&
      ReadErrorFile(error_files[w.local_rank], raised) && raised.error_file != kNotAvailable) {
    f.error_file = raised.error_file;
    return w.hang + "; it had raised before (its error file), and a thread that is not a daemon " +
           "may have kept it from exiting:\n" + raised.message;
  }
  if (w.output_tail.find("Traceback (most recent call last):") != std::string::npos) {
    return WithLastLine(w.hang + "; it had printed a traceback before", f);
  }
  return w.hang;
}

}  // namespace

std::vector<FailureRecord> CollectFailures(const GroupResult& result,
                                           const std::vector<std::string>& error_files,
                                           bool python) {
  std::vector<FailureRecord> out;
  for (size_t idx : result.failures) {
    const WorkerRecord& w = result.workers[idx];
    FailureRecord f;
    f.local_rank = w.local_rank;
    f.rank = w.rank;
    f.pid = w.pid;
    f.exit = w.exit;
    f.timestamp = std::chrono::system_clock::to_time_t(w.exit_time);
    f.error_file = kNotAvailable;
    f.lost_logs = w.lost_logs;
    f.hung = !w.hang.empty();
    f.hung_at_exit = f.hung && w.hang_at_exit;
    if (!f.hung && w.timer.empty()) f.crashed_at_exit_after = w.crashed_finished_for;
    f.timer = !w.timer.empty();
    f.output_tail = w.output_tail;
    f.tail_has_stdout = w.tail_has_stdout;
    f.stderr_seen = w.stderr_seen;
    f.after_stop = w.failed_while_stopping;
    if (w.exit.core_dumped) f.core = CoreDumpOf(w);
    if (f.hung) {
      f.message = WhatAHungRankSaid(w, error_files, f);
    } else if (f.timer) {
      f.message = w.timer;
    } else if (!w.start_error.empty()) {
      f.message = w.start_error;
    } else if (static_cast<size_t>(w.local_rank) >= error_files.size() ||
               !ReadErrorFile(error_files[w.local_rank], f)) {
      f.message = DefaultMessage(f, python);
    }
    out.push_back(std::move(f));
  }
  // Earliest timestamp first, ties in the observed order; the failures found
  // only after the stop come last: the root cause is one that caused the stop.
  std::stable_sort(out.begin(), out.end(), [](const FailureRecord& a, const FailureRecord& b) {
    if (a.after_stop != b.after_stop) return b.after_stop;
    return a.timestamp < b.timestamp;
  });
  // Unless one of those had raised before it (its error file is older, by
  // whole seconds: their resolution), and only ddprun's stop ended it (a
  // thread that is not a daemon kept it alive): that one is the root cause, as
  // torchrun takes the oldest error file.
  auto earlier = std::find_if(out.begin(), out.end(), [&](const FailureRecord& f) {
    return f.after_stop && f.timed_by_error_file && f.timestamp < out.front().timestamp;
  });
  if (earlier != out.end()) {
    earlier->raised_first = true;
    std::rotate(out.begin(), earlier, earlier + 1);
    return out;
  }
  // A rank that lost its peer ("Connection reset by peer", or SIGPIPE) failed
  // because another rank had died. Its error file's time, whole seconds, can
  // come before the time ddprun saw that death (ddprun looks late when the
  // host is starved, by as long as it did not run): a failure that is no such
  // loss, found with it before the group was stopped, is the cause.
  if (!out.empty() && DiedOfPeer(out.front()) && !out.front().after_stop) {
    auto cause = std::find_if(out.begin() + 1, out.end(), [&](const FailureRecord& f) {
      return !f.after_stop && !f.hung && !f.timer && !DiedOfPeer(f);
    });
    if (cause != out.end()) std::rotate(out.begin(), cause, cause + 1);
  }
  return out;
}

std::string FormatReport(const std::string& name, const std::string& host,
                         const std::vector<FailureRecord>& failures, const std::string& cause,
                         const std::string& fix) {
  std::string title = name + " FAILED";
  std::string root;
  std::vector<std::string> others;
  size_t width = title.size();
  for (size_t i = 0; i < failures.size(); ++i) {
    std::string one = FormatOne(i, host, failures[i]);
    width = std::max(width, Widest(one));
    (i == 0 ? root : others.emplace_back()) = one;
  }
  width = std::min(width, kMaxWidth);
  std::string border(width, '='), section(width, '-');
  std::ostringstream o;
  o << border << "\n" << title << "\n" << section << "\nFailures:\n";
  if (others.empty()) o << "  <NO_OTHER_FAILURES>\n";
  for (const auto& f : others) o << f << "\n";
  o << section << "\nRoot Cause (first observed failure):\n" << root << "\n";
  if (!cause.empty()) o << "  cause     : " << cause << "\n";
  if (!fix.empty()) o << "  fix       : " << fix << "\n";
  o << border << "\n";
  return o.str();
}

Status DumpRootCause(const FailureRecord& root, const std::string& path) {
  json data;
  if (!root.error_file.empty()) {
    const std::string text = ReadSmallFile(root.error_file, kErrorFileLimit + 1);
    if (text.size() <= kErrorFileLimit && !NestsTooDeep(text))
      data = json::parse(StrictJson(text), nullptr, false);
  }
  if (!data.is_object() || !data.contains("message")) {
    data = {{"message",
             {{"message", root.message},
              {"extraInfo", {{"timestamp", std::to_string(root.timestamp)}}}}}};
  }
  if (root.exit.TorchCode() != 0 && data["message"].is_object()) {
    data["message"]["errorCode"] = root.exit.TorchCode();
  }
  return WriteSmallFile(path, data.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace ddprun::supervisor
