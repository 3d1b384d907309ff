#include "rendezvous/store_state.hpp"

#include "base/format.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace ddprun::rendezvous {

namespace {

bool ParseDecimal(const std::string& s, int64_t* out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

// ADD reads the stored value as PyTorch's server does, with std::stoll:
// leading white space, an optional sign, then digits up to the first other
// character ("5abc" is 5). No digit, or a number past i64, is an error.
bool ParseLikeStoll(const std::string& s, int64_t* out) {
  size_t i = s.find_first_not_of(" \t\n\v\f\r");
  if (i == std::string::npos) return false;
  const bool minus = s[i] == '-';
  if (s[i] == '-' || s[i] == '+') ++i;
  if (i == s.size() || s[i] < '0' || s[i] > '9') return false;
  uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(s.data() + i, s.data() + s.size(), magnitude);
  const uint64_t limit = static_cast<uint64_t>(INT64_MAX) + (minus ? 1 : 0);
  if (ec != std::errc() || magnitude > limit) return false;
  *out = static_cast<int64_t>(minus ? 0 - magnitude : magnitude);
  return true;
}

// Counters wrap around in two's complement instead of overflowing (which is
// undefined behaviour): PyTorch adds plain int64_t, which wraps on its
// compilers, and a client may send any delta.
int64_t WrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

}  // namespace

bool StoreState::Present(const std::string& key) const {
  if (kv_.count(key) != 0) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

void StoreState::Wake(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<ClientId> clients = std::move(it->second);
  waiters_.erase(it);
  for (ClientId c : clients) {
    auto a = awaited_.find(c);
    if (a == awaited_.end()) continue;
    if (--a->second == 0) {
      awaited_.erase(a);
      Encoder e;
      Reply(c, e.U8(kStopWaiting));
    }
  }
}

// A queue push completes at most one waiter: the first whose wait it ends.
void StoreState::WakeOne(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& clients = it->second;
  for (auto c = clients.begin(); c != clients.end(); ++c) {
    auto a = awaited_.find(*c);
    if (a == awaited_.end() || a->second != 1) continue;
    ClientId id = *c;
    clients.erase(c);
    if (clients.empty()) waiters_.erase(it);
    awaited_.erase(a);
    Encoder e;
    Reply(id, e.U8(kStopWaiting));
    return;
  }
}

void StoreState::Wait(ClientId client, const std::vector<std::string>& keys) {
  size_t missing = 0;
  for (const auto& k : keys) {
    if (Present(k)) continue;
    waiters_[k].push_back(client);
    ++missing;
  }
  if (missing == 0) {
    Encoder e;
    Reply(client, e.U8(kStopWaiting));
    return;
  }
  awaited_[client] += missing;
}

bool StoreState::Add(ClientId client, const Request& r) {
  int64_t value = 0;
  auto it = kv_.find(r.keys[0]);
  if (it != kv_.end() && !ParseLikeStoll(it->second, &value)) {
    // std::stoll's reading failed at its first digit (none: not a number) or past its range.
    const std::string& v = it->second;
    size_t at = v.find_first_not_of(" \t\n\v\f\r");
    if (at != std::string::npos && (v[at] == '+' || v[at] == '-')) ++at;
    const bool digit = at < v.size() && v[at] >= '0' && v[at] <= '9';
    refusal_ = "ADD to a value that is " +
               std::string(digit ? "a number out of a 64-bit counter's range" : "not a number") +
               " (\"" + Printable(v, 40) + "\")";
    return false;
  }
  value = WrappingAdd(value, r.number);
  kv_[r.keys[0]] = std::to_string(value);
  Encoder e;
  Reply(client, e.I64(value));
  Wake(r.keys[0]);
  return true;
}

// PyTorch's rules: a missing key is created only when `expected` is empty,
// and otherwise `expected` is returned unchanged; a present key is replaced
// when it equals `expected`; the reply is the value now stored.
void StoreState::CompareSet(ClientId client, const Request& r) {
  const std::string& key = r.keys[0];
  const std::string& expected = r.values[0];
  const std::string& desired = r.values[1];
  Encoder e;
  auto it = kv_.find(key);
  if (it == kv_.end()) {
    if (expected.empty()) {
      kv_[key] = desired;
      e.Str(desired);
    } else {
      e.Str(expected);
    }
  } else {
    if (it->second == expected) it->second = desired;
    e.Str(it->second);
  }
  Reply(client, e);
  Wake(key);
}

void StoreState::Barrier(ClientId client, const Request& r) {
  int64_t count = 0;
  auto it = kv_.find(r.keys[0]);
  if (it != kv_.end() && !ParseDecimal(it->second, &count)) count = 0;
  count = WrappingAdd(count, 1);
  kv_[r.keys[0]] = std::to_string(count);
  if (count >= r.number) {
    Encoder e;
    Reply(client, e.U8(kStopWaiting));
    Wake(r.keys[0]);
    return;
  }
  waiters_[r.keys[0]].push_back(client);
  awaited_[client] += 1;
}

bool StoreState::Handle(ClientId client, const Request& r) {
  refusal_.clear();
  Encoder e;
  switch (r.op) {
    case Op::kPing:
      Reply(client, e.U32(r.word));
      return true;
    case Op::kSet:
      kv_[r.keys[0]] = r.values[0];
      Wake(r.keys[0]);
      return true;
    case Op::kCompareSet:
      CompareSet(client, r);
      return true;
    case Op::kGet: {
      auto it = kv_.find(r.keys[0]);
      Reply(client, e.Str(it == kv_.end() ? std::string() : it->second));
      return true;
    }
    case Op::kAdd:
      return Add(client, r);
    case Op::kCheck: {
      bool all = std::all_of(r.keys.begin(), r.keys.end(), [&](auto& k) { return Present(k); });
      Reply(client, e.U8(all ? kReady : kNotReady));
      return true;
    }
    case Op::kWait:
      Wait(client, r.keys);
      return true;
    case Op::kGetNumKeys:
      Reply(client, e.I64(static_cast<int64_t>(kv_.size())));
      return true;
    case Op::kDeleteKey:
      Reply(client, e.I64(static_cast<int64_t>(kv_.erase(r.keys[0]))));
      return true;
    case Op::kAppend: {
      // Each piece is held to max_value by the parser; the value they make is
      // too (attack 108: APPENDs of 48 MiB made one of 288 MiB, its GET's reply
      // as large).
      std::string& value = kv_[r.keys[0]];
      if (r.values[0].size() > max_value_ - std::min(max_value_, value.size())) {
        refusal_ = "APPEND of " + std::to_string(r.values[0].size()) + " bytes to a value of " +
                   std::to_string(value.size()) + " bytes: the value would pass " +
                   std::to_string(max_value_) + " bytes (the limit of a value)";
        return false;
      }
      value.append(r.values[0]);
      Wake(r.keys[0]);
      return true;
    }
    case Op::kMultiGet: {
      // Sized before it is made: one small request naming a large value many
      // times asked for gigabytes, and the launcher ran out of memory (attack 93).
      size_t size = 0;
      for (const auto& k : r.keys) {
        auto it = kv_.find(k);
        size += sizeof(uint64_t) + (it == kv_.end() ? 0 : it->second.size());
        if (size > max_reply_) {
          refusal_ = "MULTI_GET of " + std::to_string(r.keys.size()) +
                     " keys: its reply would pass " + std::to_string(max_reply_) +
                     " bytes (the limit): ask for fewer keys at once";
          return false;
        }
      }
      e.Reserve(size);
      for (const auto& k : r.keys) {
        auto it = kv_.find(k);
        e.Str(it == kv_.end() ? std::string() : it->second);
      }
      Reply(client, e);
      return true;
    }
    case Op::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) {
        kv_[r.keys[i]] = r.values[i];
        Wake(r.keys[i]);
      }
      return true;
    case Op::kCancelWait:
      Disconnect(client);
      Reply(client, e.U8(kWaitCanceled));
      return true;
    case Op::kQueuePush:
      queues_[r.keys[0]].push_back(r.values[0]);
      WakeOne(r.keys[0]);
      return true;
    case Op::kQueuePop: {
      auto it = queues_.find(r.keys[0]);
      e.I64(it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size()));
      if (it != queues_.end() && !it->second.empty()) {
        e.Str(it->second.front());
        it->second.pop_front();
      }
      Reply(client, e);
      return true;
    }
    case Op::kQueueLen: {
      auto it = queues_.find(r.keys[0]);
      Reply(client, e.I64(it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size())));
      return true;
    }
    case Op::kListKeys:
      e.I64(static_cast<int64_t>(kv_.size()));
      for (const auto& [k, v] : kv_) e.Str(k);
      Reply(client, e);
      return true;
    case Op::kBarrier:
      Barrier(client, r);
      return true;
    case Op::kValidate:
    case Op::kAuth:
    case Op::kAgent:
    case Op::kClearWorkers:
      return false;  // connection-level requests: the server handles them
  }
  return false;
}

size_t StoreState::ReplySize(const Request& r) const {
  constexpr size_t kLength = sizeof(uint64_t);
  const auto value = [&](const std::string& key) {
    auto it = kv_.find(key);
    return kLength + (it == kv_.end() ? 0 : it->second.size());
  };
  switch (r.op) {
    case Op::kGet:
      return value(r.keys[0]);
    case Op::kCompareSet:  // the value stored, or one of the request's
      return std::max(
          {value(r.keys[0]), kLength + r.values[0].size(), kLength + r.values[1].size()});
    case Op::kMultiGet: {
      size_t size = 0;
      for (const auto& k : r.keys) size += value(k);
      return size;
    }
    case Op::kQueuePop: {
      auto it = queues_.find(r.keys[0]);
      const bool empty = it == queues_.end() || it->second.empty();
      return empty ? kLength : 2 * kLength + it->second.front().size();
    }
    case Op::kListKeys: {
      size_t size = kLength;
      for (const auto& entry : kv_) size += kLength + entry.first.size();
      return size;
    }
    default:
      return 2 * kLength;
  }
}

void StoreState::Disconnect(ClientId client) {
  if (awaited_.erase(client) == 0) return;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), client), v.end());
    it = v.empty() ? waiters_.erase(it) : std::next(it);
  }
}

void StoreState::Clear() {
  kv_.clear();
  queues_.clear();
}

}  // namespace ddprun::rendezvous
