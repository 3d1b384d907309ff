#include "rendezvous/rendezvous.hpp"

#include <algorithm>
#include <sstream>
#include <tuple>

namespace ddprun::rendezvous {

namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    out.emplace_back(s, start, end - start);
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string NodeInfo::Encode() const {
  std::ostringstream o;
  o << agent_id << '\t' << name << '\t' << addr << '\t' << nproc << '\t' << requested_rank;
  return o.str();
}

StatusOr<NodeInfo> NodeInfo::Decode(const std::string& text) {
  auto f = Split(text, '\t');
  if (f.size() != 5) return InvalidArgument("rendezvous: malformed node record \"" + text + "\"");
  NodeInfo n;
  n.agent_id = f[0];
  n.name = f[1];
  n.addr = f[2];
  try {
    n.nproc = std::stoi(f[3]);
    n.requested_rank = std::stoi(f[4]);
  } catch (const std::exception&) {
    return InvalidArgument("rendezvous: malformed node record \"" + text + "\"");
  }
  return n;
}

std::vector<NodeInfo> AssignRanks(std::vector<NodeInfo> by_arrival) {
  const size_t n = by_arrival.size();
  std::vector<std::optional<NodeInfo>> slots(n);
  std::vector<std::pair<size_t, NodeInfo>> rest;  // (arrival, node)
  for (size_t i = 0; i < n; ++i) {
    int want = by_arrival[i].requested_rank;
    if (want >= 0 && static_cast<size_t>(want) < n && !slots[want]) {
      slots[want] = by_arrival[i];
    } else {
      rest.emplace_back(i, by_arrival[i]);
    }
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.name, a.first) < std::tie(b.second.name, b.first);
  });
  std::vector<NodeInfo> out;
  size_t next = 0;
  for (auto& slot : slots) out.push_back(slot ? *slot : rest[next++].second);
  return out;
}

std::string EncodeMembers(const std::vector<NodeInfo>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += n.Encode() + "\n";
  return out;
}

StatusOr<std::vector<NodeInfo>> DecodeMembers(const std::string& text) {
  std::vector<NodeInfo> out;
  for (const auto& line : Split(text, '\n')) {
    if (line.empty()) continue;
    auto n = NodeInfo::Decode(line);
    if (!n.ok()) return n.status();
    out.push_back(*n);
  }
  return out;
}

}  // namespace ddprun::rendezvous
