#include "rendezvous/store_guard.hpp"

#include <algorithm>
#include <iterator>

namespace ddprun::rendezvous {

namespace {

// Host records kept for their failure counts alone; past this, the records of
// hosts without connections are dropped (an attacker with this many addresses
// gets a fresh count for each).
constexpr size_t kMaxHosts = 65536;

}  // namespace

StoreGuard::Admission StoreGuard::Connect(ClientId id, const std::string& host, Time now) {
  Admission a;
  if (hosts_.size() >= kMaxHosts) DropIdleHosts();
  Host& h = hosts_[host];
  if (h.connections >= limits_.max_connections_per_host) {
    a.refusal = "host " + host + " already has " + std::to_string(h.connections) +
                " connections (the per-host limit)";
    Forget(host);
    return a;
  }
  if (handshaking_ >= limits_.max_handshaking) {
    std::optional<ClientId> oldest = OldestOfBusiestHost();
    if (oldest && now - conns_.at(*oldest).since >= limits_.evict_after) {
      a.evict = oldest;
    } else if (handshaking_ >= limits_.max_handshaking_hard) {
      a.refusal = std::to_string(handshaking_) +
                  " connections are in the handshake (the limit) and none for long";
      Forget(host);
      return a;
    }
  }
  ++h.connections;
  h.handshaking.insert(id);
  ++handshaking_;
  Time deadline = now + limits_.handshake_timeout;
  conns_[id] = Conn{host, now, deadline};
  deadlines_.emplace(deadline, id);
  a.admitted = true;
  return a;
}

// The oldest handshaking connection of the host with the most of them.
std::optional<ClientId> StoreGuard::OldestOfBusiestHost() const {
  const Host* most = nullptr;
  for (const auto& [name, h] : hosts_) {
    if (!h.handshaking.empty() && (!most || h.handshaking.size() > most->handshaking.size())) {
      most = &h;
    }
  }
  if (!most) return std::nullopt;
  return *most->handshaking.begin();
}

void StoreGuard::Ready(ClientId id) {
  auto it = conns_.find(id);
  if (it != conns_.end()) LeaveHandshake(id, it->second);
}

void StoreGuard::LeaveHandshake(ClientId id, Conn& conn) {
  if (!conn.handshaking) return;
  conn.handshaking = false;
  --handshaking_;
  deadlines_.erase({conn.deadline, id});
  Host& h = hosts_[conn.host];
  h.handshaking.erase(id);
  auto queued = std::find(h.auth_queue.begin(), h.auth_queue.end(), id);
  if (queued != h.auth_queue.end()) h.auth_queue.erase(queued);
  if (h.auth_queue.empty()) queued_hosts_.erase(conn.host);
}

void StoreGuard::Disconnect(ClientId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  LeaveHandshake(id, it->second);
  std::string host = std::move(it->second.host);
  conns_.erase(it);
  --hosts_[host].connections;
  Forget(host);
}

// Drops a host's record once it holds nothing worth keeping, so that the map
// does not grow with every address that ever connected.
void StoreGuard::Forget(const std::string& host) {
  auto it = hosts_.find(host);
  if (it != hosts_.end() && it->second.connections == 0 && it->second.failures == 0) {
    hosts_.erase(it);
  }
}

void StoreGuard::DropIdleHosts() {
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    it = it->second.connections == 0 ? hosts_.erase(it) : std::next(it);
  }
}

size_t StoreGuard::HandshakeBytesLeft(ClientId id) const {
  auto it = conns_.find(id);
  if (it == conns_.end() || !it->second.handshaking) return 0;
  return limits_.handshake_bytes - std::min(it->second.handshake_bytes, limits_.handshake_bytes);
}

bool StoreGuard::CountHandshakeBytes(ClientId id, size_t n) {
  auto it = conns_.find(id);
  if (it == conns_.end() || !it->second.handshaking) return true;
  it->second.handshake_bytes += n;
  return it->second.handshake_bytes <= limits_.handshake_bytes;
}

StoreGuard::Turn StoreGuard::Auth(ClientId id, Time now) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return Turn::kRefused;
  const std::string& host = it->second.host;
  Host& h = hosts_[host];
  if (h.failures > 0 && now - h.last_failure >= limits_.auth_forget) h.failures = 0;
  if (h.auth_queue.empty() && now >= h.next_verdict) return Turn::kNow;
  if (h.auth_queue.size() >= limits_.max_auth_queue) return Turn::kRefused;
  h.auth_queue.push_back(id);
  queued_hosts_.insert(host);
  return Turn::kQueued;
}

void StoreGuard::Judged(ClientId id, bool ok, Time now) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Host& h = hosts_[it->second.host];
  if (ok) {
    h.failures = 0;
    h.next_verdict = now;
    return;
  }
  ++h.failures;
  h.last_failure = now;
  h.next_verdict = now + Backoff(h.failures);
}

std::chrono::milliseconds StoreGuard::Backoff(int failures) const {
  auto delay = limits_.auth_backoff;
  for (int i = 1; i < failures && delay < limits_.auth_backoff_max; ++i) delay *= 2;
  return std::min(delay, limits_.auth_backoff_max);
}

std::optional<ClientId> StoreGuard::NextDueAuth(Time now) {
  for (const std::string& host : queued_hosts_) {
    Host& h = hosts_[host];
    if (now < h.next_verdict) continue;
    ClientId id = h.auth_queue.front();
    h.auth_queue.pop_front();
    if (h.auth_queue.empty()) queued_hosts_.erase(host);  // returns at once: no iterator use
    return id;
  }
  return std::nullopt;
}

std::vector<ClientId> StoreGuard::Expired(Time now) {
  std::vector<ClientId> out;
  for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first <= now; ++it) {
    out.push_back(it->second);
  }
  return out;
}

std::optional<StoreGuard::Time> StoreGuard::NextDeadline() const {
  std::optional<Time> next;
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  for (const std::string& host : queued_hosts_) {
    Time t = hosts_.at(host).next_verdict;
    if (!next || t < *next) next = t;
  }
  return next;
}

}  // namespace ddprun::rendezvous
