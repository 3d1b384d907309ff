#include "rendezvous/rendezvous.hpp"

#include <algorithm>
#include <sstream>
#include <thread>

namespace ddprun::rendezvous {

namespace {

constexpr std::chrono::milliseconds kPollSlice{1000};

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

std::string Seconds(std::chrono::milliseconds d) {
  std::ostringstream o;
  o << d.count() / 1000.0 << " s";
  return o.str();
}

}  // namespace

std::string NodeInfo::Encode() const {
  std::ostringstream o;
  o << agent_id << '\t' << name << '\t' << addr << '\t' << nproc << '\t' << requested_rank << '\t'
    << worker_store_port;
  return o.str();
}

StatusOr<NodeInfo> NodeInfo::Decode(const std::string& text) {
  auto f = Split(text, '\t');
  if (f.size() != 6) return InvalidArgument("rendezvous: malformed node record \"" + text + "\"");
  NodeInfo n;
  n.agent_id = f[0];
  n.name = f[1];
  n.addr = f[2];
  try {
    n.nproc = std::stoi(f[3]);
    n.requested_rank = std::stoi(f[4]);
    n.worker_store_port = std::stoi(f[5]);
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

void ParseClosed(const std::string& value, int* exit_code, std::string* message) {
  auto space = value.find(' ');
  *exit_code = 1;
  try {
    *exit_code = std::stoi(value.substr(0, space));
  } catch (const std::exception&) {
  }
  *message = space == std::string::npos ? value : value.substr(space + 1);
}

StatusOr<Rendezvous> Rendezvous::Connect(const std::string& host, int port,
                                         RendezvousSettings settings, NodeInfo self) {
  auto client = StoreClient::Connect(host, port, settings.read_timeout, settings.token);
  if (!client.ok()) return client.status().Annotate("rendezvous");
  return Rendezvous(std::move(*client), std::move(settings), std::move(self));
}

Status Rendezvous::CheckClosed() {
  auto closed = client_.Check({keys_.Closed()});
  if (!closed.ok()) return closed.status();
  if (!*closed) return Status::Ok();
  auto value = client_.Get(keys_.Closed());
  if (!value.ok()) return value.status();
  AnnounceLeaving();
  return Status(StatusCode::kAborted, *value);
}

Status Rendezvous::CheckHostedJob() {
  if (checked_host_) return Status::Ok();
  auto hosted = client_.Get(RendezvousKeys::HostedRunId());
  if (!hosted.ok()) return hosted.status().Annotate("rendezvous: which job the store hosts");
  if (*hosted != settings_.run_id) {
    return InvalidArgument("rendezvous: the store at " + client_.address() + " coordinates job \"" +
                           *hosted + "\", not \"" + settings_.run_id +
                           "\": give every agent of a job the same --rdzv_id, or use another "
                           "--rdzv_endpoint");
  }
  checked_host_ = true;
  return Status::Ok();
}

StatusOr<RoundResult> Rendezvous::NextRound() {
  if (Status s = CheckHostedJob(); !s.ok()) return s;
  int min_round = 0;
  while (true) {
    if (Status s = CheckClosed(); !s.ok()) return s;
    auto open = client_.Add(keys_.Round(), 0);
    if (!open.ok()) return open.status();
    int round = std::max(min_round, static_cast<int>(*open));
    auto result = TryRound(round);
    if (!result.ok()) return result.status();
    if (*result) return **result;
    min_round = round + 1;  // it closed without us: we wait in the next one
  }
}

StatusOr<std::optional<RoundResult>> Rendezvous::TryRound(int round) {
  last_round_ = round;
  auto arrival = client_.Add(keys_.Join(round), 1);
  if (!arrival.ok()) return arrival.status();
  if (Status s = client_.Set(keys_.Node(round, static_cast<int>(*arrival - 1)), self_.Encode());
      !s.ok()) {
    return s;
  }
  // A little past the coordinator's own deadline, so that its report (which
  // names the nodes seen and missing) is what every agent prints.
  const auto deadline = Clock::now() + settings_.join_timeout + std::chrono::seconds(2);
  while (true) {
    Status s = client_.Wait({keys_.Result(round)}, kPollSlice);
    if (s.ok()) break;
    if (s.code() != StatusCode::kDeadlineExceeded) return s;
    if (Status c = CheckClosed(); !c.ok()) return c;
    if (Clock::now() >= deadline) {
      auto joined = client_.Add(keys_.Join(round), 0);
      return Status(StatusCode::kDeadlineExceeded,
                    "rendezvous round " + std::to_string(round) + " did not complete within " +
                        Seconds(settings_.join_timeout) + ": " +
                        std::to_string(joined.ok() ? *joined : -1) + " agent(s) joined, " +
                        std::to_string(settings_.min_nodes) + " needed (join_timeout)");
    }
  }
  auto text = client_.Get(keys_.Result(round));
  if (!text.ok()) return text.status();
  auto nodes = DecodeMembers(*text);
  if (!nodes.ok()) return nodes.status();
  RoundResult r;
  r.round = round;
  r.nodes = *nodes;
  bool member = false;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    if (r.nodes[i].agent_id == self_.agent_id) {
      member = true;
      r.node_rank = static_cast<int>(i);
      r.base_rank = r.world_size;
    }
    r.world_size += r.nodes[i].nproc;
  }
  if (!member) return std::optional<RoundResult>();
  return std::optional<RoundResult>(r);
}

Status Rendezvous::MarkCleared(int round) { return client_.Set(keys_.Cleared(round), "1"); }

Status Rendezvous::WaitCleared(int round) {
  return client_.Wait({keys_.Cleared(round)}, settings_.read_timeout);
}

Status Rendezvous::EndRound(int round, const std::string& reason) {
  // The first reason wins: a failure is not overwritten by its consequences.
  auto r = client_.CompareSet(keys_.End(round), "", reason);
  return r.ok() ? Status::Ok() : r.status();
}

StatusOr<std::optional<std::string>> Rendezvous::RoundEnd(int round) {
  auto ended = client_.Check({keys_.End(round)});
  if (!ended.ok()) return ended.status();
  if (!*ended) return std::optional<std::string>();
  auto reason = client_.Get(keys_.End(round));
  if (!reason.ok()) return reason.status();
  return std::optional<std::string>(*reason);
}

Status Rendezvous::Close(int exit_code, const std::string& message) {
  auto r = client_.CompareSet(keys_.Closed(), "", std::to_string(exit_code) + " " + message);
  return r.ok() ? Status::Ok() : r.status();
}

StatusOr<bool> Rendezvous::FinishRound(const RoundResult& round) {
  if (Status s = client_.Set(keys_.Done(round.round, round.node_rank), "1"); !s.ok()) return s;
  std::vector<std::string> done;
  for (size_t i = 0; i < round.nodes.size(); ++i) {
    done.push_back(keys_.Done(round.round, static_cast<int>(i)));
  }
  while (true) {
    Status s = client_.Wait(done, kPollSlice);
    if (s.ok()) break;
    if (s.code() != StatusCode::kDeadlineExceeded) return s;
    auto end = RoundEnd(round.round);
    if (!end.ok()) return end.status();
    if (*end) return false;
  }
  if (Status s = client_.Set(keys_.Exit(round.round, round.node_rank), "1"); !s.ok()) return s;
  return true;
}

void Rendezvous::WaitExits(const RoundResult& round, std::chrono::milliseconds timeout) {
  std::vector<std::string> exits;
  for (size_t i = 0; i < round.nodes.size(); ++i) {
    exits.push_back(keys_.Exit(round.round, static_cast<int>(i)));
  }
  (void)client_.Wait(exits, timeout);
}

void Rendezvous::AnnounceLeaving() {
  if (announced_) return;
  announced_ = true;
  (void)client_.Add(keys_.Leaving(), 1);
}

int Rendezvous::JoinedLastRound() {
  if (last_round_ < 0) return 1;
  return static_cast<int>(client_.Add(keys_.Join(last_round_), 0).value_or(1));
}

void Rendezvous::WaitOthersLeaving(int others, std::chrono::milliseconds timeout) {
  // Bounded: an agent that was killed never says it leaves. The store has no
  // "wait for a counter" request, so this looks every few milliseconds.
  const auto deadline = Clock::now() + timeout;
  const int expected = others + (announced_ ? 1 : 0);  // this agent may have counted itself
  while (Clock::now() < deadline) {
    auto left = client_.Add(keys_.Leaving(), 0);
    if (!left.ok() || *left >= expected) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ddprun::rendezvous
