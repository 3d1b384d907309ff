#include "supervisor/file_timer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "env/processes.hpp"

namespace ddprun::supervisor {

using nlohmann::json;

namespace {

constexpr int kMaxSignal = 64;  // SIGRTMAX on Linux

// Wall-clock seconds (a float, as Python's time.time()) as a time point.
WallTime FromEpochSeconds(double s) {
  return WallTime(std::chrono::duration_cast<WallTime::duration>(Duration(s)));
}

Status Bad(const std::string& what) { return InvalidArgument("file timer request: " + what); }

}  // namespace

StatusOr<TimerRequest> ParseTimerRequest(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  TimerRequest r;
  const auto pid = j.find("pid");
  if (pid == j.end() || !pid->is_number_integer() || pid->get<long long>() <= 0 ||
      pid->get<long long>() > INT32_MAX) {
    return Bad("\"pid\" is not a process id");
  }
  r.pid = static_cast<pid_t>(pid->get<long long>());
  const auto scope = j.find("scope_id");
  if (scope == j.end() || !scope->is_string()) return Bad("\"scope_id\" is not a string");
  r.scope = scope->get<std::string>();
  const auto expiration = j.find("expiration_time");
  if (expiration == j.end() || !expiration->is_number() ||
      !std::isfinite(expiration->get<double>())) {
    return Bad("\"expiration_time\" is not a number");
  }
  const double t = expiration->get<double>();
  if (t >= 0) r.expires = FromEpochSeconds(t);
  const auto sig = j.find("signal");
  if (sig == j.end() || !sig->is_number_integer() || sig->get<long long>() > kMaxSignal) {
    return Bad("\"signal\" is not a signal number");
  }
  r.signal = static_cast<int>(std::max<long long>(sig->get<long long>(), -1));
  return r;
}

void TimerTable::Apply(const TimerRequest& request, WallTime now) {
  const auto key = std::make_pair(request.pid, request.scope);
  if (!request.expires) {
    timers_.erase(key);
    return;
  }
  timers_[key] = Armed{*request.expires, now, request.signal};
}

std::vector<ExpiredTimer> TimerTable::TakeExpired(WallTime now) {
  // Per pid, the chosen timer: torch sorts a pid's expired timers by
  // expiration time and acts on the first with a signal.
  std::map<pid_t, std::pair<const Armed*, std::string>> chosen;
  for (const auto& [key, armed] : timers_) {
    if (armed.expires > now) continue;
    auto [it, first] = chosen.try_emplace(key.first, &armed, key.second);
    const Armed& best = *it->second.first;
    const bool better =
        (armed.signal > 0) != (best.signal > 0) ? armed.signal > 0 : armed.expires < best.expires;
    if (!first && better) it->second = {&armed, key.second};
  }
  std::vector<ExpiredTimer> out;
  for (const auto& [pid, pick] : chosen) {
    const Armed& a = *pick.first;
    out.push_back({pid, pick.second, a.signal, now - a.arrived, a.expires - a.arrived});
  }
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = chosen.count(it->first.first) != 0 ? timers_.erase(it) : std::next(it);
  }
  return out;
}

void TimerTable::Postpone(Duration by) {
  const auto d = std::chrono::duration_cast<WallTime::duration>(by);
  for (auto& [key, armed] : timers_) {
    armed.expires += d;
    armed.arrived += d;
  }
}

std::optional<WallTime> TimerTable::NextExpiry() const {
  std::optional<WallTime> next;
  for (const auto& [key, armed] : timers_) {
    if (!next || armed.expires < *next) next = armed.expires;
  }
  return next;
}

void RequestLines::Feed(std::string_view data, const LineFn& line,
                        const std::function<void()>& too_long) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const std::string_view piece = data.substr(0, nl);
    data.remove_prefix(nl == std::string_view::npos ? data.size() : nl + 1);
    if (!skipping_) partial_.append(piece);
    if (!skipping_ && partial_.size() > kMaxTimerRequest) {
      skipping_ = true;
      partial_.clear();
      too_long();
    }
    if (nl == std::string_view::npos) return;
    if (!skipping_ && !partial_.empty()) line(partial_);
    partial_.clear();
    skipping_ = false;
  }
}

std::optional<size_t> OwningWorker(pid_t pid, const std::vector<pid_t>& worker_pids,
                                   const std::function<pid_t(pid_t)>& parent_of) {
  // Bounded: a loop in made-up parents, or a very deep tree, ends it.
  for (int depth = 0; pid > 1 && depth < 4096; ++depth) {
    auto it = std::find(worker_pids.begin(), worker_pids.end(), pid);
    if (it != worker_pids.end()) return static_cast<size_t>(it - worker_pids.begin());
    const pid_t parent = parent_of(pid);
    if (parent == pid) break;
    pid = parent;
  }
  return std::nullopt;
}

pid_t ParentPid(pid_t pid) {
  const auto entry = env::ReadProcEntry(pid);
  return entry ? entry->ppid : 0;
}

}  // namespace ddprun::supervisor
