#include "rendezvous/reply_budget.hpp"

#include <algorithm>
#include <utility>

namespace ddprun::rendezvous {

void ReplyBudget::Update(ClientId id, size_t held, size_t untaken, Time now) {
  auto it = holding_.find(id);
  if (it == holding_.end()) {
    if (held == 0) return;
    it = holding_.emplace(id, Holding{0, untaken, now}).first;
  }
  Holding& h = it->second;
  if (h.held != held || h.untaken != untaken) h.moved = now;
  total_ = total_ - h.held + held;
  h.held = held;
  h.untaken = untaken;
  if (held == 0) holding_.erase(it);
}

void ReplyBudget::Closing(ClientId id) {
  if (auto it = holding_.find(id); it != holding_.end()) it->second.closing = true;
}

void ReplyBudget::Remove(ClientId id) {
  auto it = holding_.find(id);
  if (it == holding_.end()) return;
  total_ -= it->second.held;
  holding_.erase(it);
}

size_t ReplyBudget::held(ClientId id) const {
  auto it = holding_.find(id);
  return it == holding_.end() ? 0 : it->second.held;
}

std::vector<ClientId> ReplyBudget::Stalled(Time now) const {
  if (!over()) return {};
  std::vector<std::pair<size_t, ClientId>> stalled;
  size_t left = total_;
  for (const auto& [id, h] : holding_) {
    if (h.closing) {
      left -= h.held;  // freed soon
    } else if (now - h.moved >= limits_.stalled_after) {
      stalled.emplace_back(h.held, id);
    }
  }
  // The most held first; among equals the oldest connection (ids grow with accept time).
  std::sort(stalled.begin(), stalled.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<ClientId> out;
  for (const auto& [bytes, id] : stalled) {
    if (left <= limits_.max_total) break;
    out.push_back(id);
    left -= bytes;
  }
  return out;
}

std::vector<ClientId> ReplyBudget::Holders() const {
  std::vector<ClientId> out;
  out.reserve(holding_.size());
  for (const auto& entry : holding_) out.push_back(entry.first);
  return out;
}

std::optional<ReplyBudget::Time> ReplyBudget::NextLook(Time now) const {
  if (!over()) return std::nullopt;
  return now + limits_.look_every;
}

}  // namespace ddprun::rendezvous
