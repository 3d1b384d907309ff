#include "rendezvous/coordinator.hpp"

#include <map>
#include <sstream>

namespace ddprun::rendezvous {

namespace {

constexpr std::chrono::milliseconds kSlice{200};

std::string Describe(const NodeInfo& n, int rank) {
  return n.name + " (" + n.addr + ", node rank " + std::to_string(rank) + ")";
}

}  // namespace

Coordinator::Coordinator(StoreClient client, RendezvousSettings settings, Log log)
    : client_(std::move(client)),
      settings_(std::move(settings)),
      keys_(settings_.run_id),
      log_(std::move(log)) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  // Agents of another job that reach this store learn it at once.
  (void)client_.Set(RendezvousKeys::HostedRunId(), settings_.run_id);
  thread_ = std::thread([this] { Run(); });
}

void Coordinator::Stop() {
  stop_ = true;
  client_.Interrupt();
  if (thread_.joinable()) thread_.join();
}

void Coordinator::Run() {
  for (int round = 0; !stop_; ++round) {
    std::vector<NodeInfo> members;
    auto gathered = Gather(round, &members);
    if (!gathered.ok() || !*gathered) break;
    auto go_on = Watch(round, members);
    if (!go_on.ok() || !*go_on) break;
  }
}

std::string Coordinator::TimeoutReport(int round) {
  auto joined = client_.Add(keys_.Join(round), 0);
  const int n = joined.ok() ? static_cast<int>(*joined) : 0;
  std::ostringstream why;
  why << "rendezvous round " << round << " timed out after "
      << settings_.join_timeout.count() / 1000.0 << " s (join_timeout): " << n << " of at least "
      << settings_.min_nodes << " nodes joined";
  std::vector<bool> rank_seen(settings_.max_nodes, false);
  bool ranked = false;
  std::string seen;
  for (int i = 0; i < n; ++i) {
    auto text = client_.Get(keys_.Node(round, i));
    auto node = text.ok() ? NodeInfo::Decode(*text) : StatusOr<NodeInfo>(text.status());
    if (!node.ok()) continue;
    seen += (seen.empty() ? "" : ", ") + node->name + " (" + node->addr + ")";
    if (node->requested_rank >= 0 && node->requested_rank < settings_.max_nodes) {
      rank_seen[node->requested_rank] = ranked = true;
    }
  }
  if (!seen.empty()) why << "; seen: " << seen;
  if (ranked) {
    std::string missing;
    for (int r = 0; r < settings_.max_nodes; ++r) {
      if (!rank_seen[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    }
    why << "; missing node ranks: " << missing;
  }
  return why.str();
}

StatusOr<bool> Coordinator::Gather(int round, std::vector<NodeInfo>* members) {
  const int min = settings_.min_nodes, max = settings_.max_nodes;
  const auto deadline = Clock::now() + settings_.join_timeout;
  // MIN agents.
  while (true) {
    if (stop_) return false;
    Status s = client_.Wait({keys_.Node(round, min - 1)}, kSlice);
    if (s.ok()) break;
    if (s.code() != StatusCode::kDeadlineExceeded) return s;
    if (client_.Check({keys_.Closed()}).value_or(false)) return false;
    if (Clock::now() < deadline) continue;
    std::string why = TimeoutReport(round);
    (void)client_.CompareSet(keys_.Closed(), "", "1 " + why);
    log_(why);
    return false;
  }
  // The last call, unless MAX are already there.
  if (min < max) {
    auto until = Clock::now() + settings_.last_call_timeout;
    while (!stop_ && Clock::now() < until) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      Status s = client_.Wait({keys_.Node(round, max - 1)}, std::min(left, kSlice));
      if (s.ok()) break;
      if (s.code() != StatusCode::kDeadlineExceeded) return s;
    }
  }
  auto joined = client_.Add(keys_.Join(round), 0);
  if (!joined.ok()) return joined.status();
  int n = std::min<int>(static_cast<int>(*joined), max);
  std::vector<std::string> node_keys;
  for (int i = 0; i < n; ++i) node_keys.push_back(keys_.Node(round, i));
  auto records = client_.MultiGet(node_keys);
  if (!records.ok()) return records.status();
  std::vector<NodeInfo> by_arrival;
  for (const auto& text : *records) {
    auto node = NodeInfo::Decode(text);
    if (!node.ok()) return node.status();
    by_arrival.push_back(*node);
  }
  *members = AssignRanks(std::move(by_arrival));
  if (Status s = client_.Set(keys_.Result(round), EncodeMembers(*members)); !s.ok()) return s;
  auto bumped = client_.Add(keys_.Round(), 1);  // late arrivals now wait in round + 1
  if (!bumped.ok()) return bumped.status();
  return true;
}

StatusOr<bool> Coordinator::LostMember(int round, const std::vector<NodeInfo>& members,
                                       const std::string& lost) {
  const int remain = static_cast<int>(members.size()) - 1;
  std::string why = "lost " + lost + ": no keep-alive for " +
                    std::to_string(settings_.keep_alive_interval.count() *
                                   settings_.keep_alive_max_attempt / 1000.0) +
                    " s";
  log_("rendezvous: " + why);
  if (Status s = client_.CompareSet(keys_.End(round), "", "membership: " + why).status(); !s.ok()) {
    return s;
  }
  if (remain < settings_.min_nodes) {
    std::string msg = why + "; " + std::to_string(remain) +
                      " node(s) remain, fewer than the minimum of " +
                      std::to_string(settings_.min_nodes) + " (--nnodes)";
    (void)client_.CompareSet(keys_.Closed(), "", "1 " + msg);
    return false;
  }
  return true;
}

StatusOr<bool> Coordinator::Watch(int round, const std::vector<NodeInfo>& members) {
  const auto limit = settings_.keep_alive_interval * settings_.keep_alive_max_attempt;
  std::map<std::string, std::pair<std::string, Clock::time_point>> seen;  // agent -> (count, when)
  std::vector<std::string> ka_keys, done_keys;
  for (size_t i = 0; i < members.size(); ++i) {
    ka_keys.push_back(keys_.KeepAlive(members[i].agent_id));
    done_keys.push_back(keys_.Done(round, static_cast<int>(i)));
    seen[members[i].agent_id] = {"", Clock::now()};
  }
  while (!stop_) {
    // Wakes at once when an agent ends the round; otherwise every slice, to
    // look at the keep-alive counters and the agents waiting to join.
    Status end = client_.Wait({keys_.End(round)}, kSlice);
    if (end.ok()) return !client_.Check({keys_.Closed()}).value_or(true);
    if (end.code() != StatusCode::kDeadlineExceeded) return end;
    auto done = client_.Check(done_keys);
    if (done.ok() && *done) return false;  // the job finished
    for (size_t i = 0; i < members.size(); ++i) {
      auto count = client_.Add(ka_keys[i], 0);
      if (!count.ok()) return count.status();
      auto& [last, when] = seen[members[i].agent_id];
      std::string now_count = std::to_string(*count);
      if (now_count != last) {
        last = now_count;
        when = Clock::now();
      } else if (Clock::now() - when > limit) {
        return LostMember(round, members, Describe(members[i], static_cast<int>(i)));
      }
    }
    auto waiting = client_.Add(keys_.Join(round + 1), 0);
    if (!waiting.ok()) return waiting.status();
    if (*waiting > 0 && static_cast<int>(members.size()) < settings_.max_nodes) {
      std::string why = std::to_string(*waiting) + " new node(s) waiting to join";
      log_("rendezvous: round " + std::to_string(round) + " ends: " + why);
      (void)client_.CompareSet(keys_.End(round), "", "membership: " + why);
      return true;
    }
  }
  return false;
}

}  // namespace ddprun::rendezvous
