// NameLaggards: the verdict on PyTorch's side of a hang, from each rank's last
// collective in each process group (ReadTorchProgress).
//
// Sequence numbers count per process group, so they are compared only within
// one. A rank that waits inside a collective of one group for a member that
// never entered it falls behind in every other group it belongs to; it is
// blocked, not a cause. So is a rank waiting in a point-to-point operation
// (send, recv) whose peer has not posted the other side. The causes are the
// ranks that fell behind, or that a point-to-point operation waits for, and
// that wait for no one; when every such rank waits for another, they wait for
// each other (a deadlock).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/format.hpp"
#include "supervisor/torch_progress.hpp"

namespace ddprun::supervisor {
namespace {

constexpr size_t kListedMembers = 8;

// One process group as the local ranks recorded it.
struct Group {
  std::string label;                       // "" for the default group
  std::map<int, const TorchProgress*> at;  // member -> its last collective here
  std::vector<int> members;                // the local ranks that belong to it
  long latest = -1;                        // the newest number any member reached
  std::string op;                          // the collective at that number
  bool progressing = false;                // every member still beats: none is behind
  std::string Newest() const { return op + " #" + std::to_string(latest) + label; }
  long SeqOf(int rank) const {  // 0: a member that never entered one of its collectives
    const auto it = at.find(rank);
    return it == at.end() ? 0 : it->second->seq;
  }
  bool Has(int rank) const { return std::count(members.begin(), members.end(), rank) > 0; }
  bool Behind(int rank) const { return !progressing && Has(rank) && SeqOf(rank) < latest; }
  std::vector<int> WaitingIn() const {  // the members inside its newest collective
    std::vector<int> out;
    for (const auto& [rank, p] : at) {
      if (p->seq == latest && p->entered) out.push_back(rank);
    }
    return out;
  }
};

// " of process group 1 'tp' (ranks 0,1)".
std::string Label(const TorchProgress& p) {
  if (p.everyone) return "";
  std::string out = " of process group " + p.group;
  if (!p.desc.empty() && p.desc != "undefined") out += " '" + p.desc + "'";
  if (p.members.empty()) return out;
  std::vector<int> listed(p.members.begin(),
                          p.members.begin() + std::min(p.members.size(), kListedMembers));
  out += " (" + RanksNoun(listed);
  if (p.members.size() > listed.size()) {
    out += ",... " + std::to_string(p.members.size()) + " in all";
  }
  return out + ")";
}

std::string Collective(const TorchProgress& p, const std::string& label) {
  return p.op + " #" + std::to_string(p.seq) + label;
}

std::string WaitVerb(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? " waits" : " wait";
}

struct Survey {
  std::vector<int> ranks;                      // in the order given
  std::vector<int> silent;                     // recorded no collective nor p2p operation
  std::map<int, const TorchProgress*> newest;  // each rank's newest, any group
  std::map<std::string, Group> groups;
  std::map<int, std::vector<const TorchProgress*>> p2p;  // the p2p operations each waits in
  std::map<std::string, std::vector<const TorchProgress*>> raised;  // by group: not compared
  bool InP2p(int rank) const { return p2p.count(rank) != 0; }
};

// "send to rank 1", "recv from any rank".
std::string P2pName(const TorchProgress& p) {
  const std::string peer = p.peer == TorchProgress::kAnyPeer ? "any rank"
                           : p.peer == TorchProgress::kUnknownPeer
                               ? "a rank"
                               : "rank " + std::to_string(p.peer);
  return p.op + (p.op == "send" ? " to " : " from ") + peer;
}

// Whether `q`, a p2p operation, is the other side of `p`.
bool Pairs(const TorchProgress& p, const TorchProgress& q) {
  auto toward = [](const TorchProgress& a, int rank) {
    return a.peer == rank || (a.op == "recv" && a.peer == TorchProgress::kAnyPeer);
  };
  return p.op != q.op && toward(p, q.rank) && toward(q, p.rank);
}

// The ranks a p2p operation waits for: its peer (every other local member of
// the group, for a recv from any rank), also one this agent does not see (on
// another node); none when the peer waits in the other side.
std::vector<int> Awaited(const Survey& s, const TorchProgress& p) {
  std::vector<int> peers;
  if (p.peer >= 0) {
    peers.push_back(p.peer);
  } else if (p.peer == TorchProgress::kAnyPeer) {
    for (int r : s.ranks) {
      if (r != p.rank && (p.everyone || std::count(p.members.begin(), p.members.end(), r))) {
        peers.push_back(r);
      }
    }
  }
  for (int q : peers) {
    const auto it = s.p2p.find(q);
    if (it == s.p2p.end()) continue;
    for (const TorchProgress* other : it->second) {
      if (Pairs(p, *other)) return {};  // both sides posted: the transfer itself waits
    }
  }
  return peers;
}

Survey Gather(const std::vector<TorchProgress>& progress, const std::vector<int>& beating) {
  Survey s;
  // A monitored_barrier that raised on one rank (and was caught) leaves the
  // ranks' counts of that group's barriers apart for good: whoever reported it.
  for (const TorchProgress& p : progress) {
    if (p.raised) s.raised[p.group].push_back(&p);
  }
  for (const TorchProgress& p : progress) {
    if (std::find(s.ranks.begin(), s.ranks.end(), p.rank) == s.ranks.end()) {
      s.ranks.push_back(p.rank);
    }
    if (p.p2p) {
      s.p2p[p.rank].push_back(&p);
      continue;
    }
    if (p.seq < 0 || s.raised.count(p.group)) continue;
    s.newest[p.rank] = &p;  // the hook writes the newest last
    Group& g = s.groups[p.group];
    g.at[p.rank] = &p;
    g.label = Label(p);
    if (p.seq > g.latest) g.latest = p.seq, g.op = p.op;
  }
  for (int r : s.ranks) {
    if (!s.newest.count(r) && !s.InP2p(r)) s.silent.push_back(r);
  }
  for (auto& [name, g] : s.groups) {
    const TorchProgress& any = *g.at.begin()->second;
    for (int r : s.ranks) {
      const bool member =
          g.at.count(r) || any.everyone || std::count(any.members.begin(), any.members.end(), r);
      if (member) g.members.push_back(r);
    }
    g.progressing = !beating.empty() && std::all_of(g.members.begin(), g.members.end(), [&](int r) {
      return std::count(beating.begin(), beating.end(), r) > 0;
    });
  }
  return s;
}

// The members of the group that `rank` waits in which did not enter that
// collective, or the peers its p2p operations wait for; empty when it waits
// for no local rank, or does not wait.
std::vector<int> WaitsFor(const Survey& s, int rank) {
  if (const auto p2p = s.p2p.find(rank); p2p != s.p2p.end()) {
    std::vector<int> out;
    for (const TorchProgress* p : p2p->second) {
      for (int q : Awaited(s, *p)) {
        if (!std::count(out.begin(), out.end(), q)) out.push_back(q);
      }
    }
    return out;
  }
  const auto it = s.newest.find(rank);
  if (it == s.newest.end() || !it->second->entered) return {};
  const TorchProgress& p = *it->second;
  const Group& g = s.groups.at(p.group);
  if (g.progressing) return {};  // it waits a moment, as each collective does
  std::vector<int> out;
  for (int m : g.members) {
    if (g.SeqOf(m) < p.seq) out.push_back(m);
  }
  return out;
}

// Ranks at a group's newest number that called different collectives there.
bool Mismatch(const Survey& s, TorchSide& side) {
  for (const auto& [name, g] : s.groups) {
    std::map<std::string, std::vector<int>> by_op;
    for (const auto& [rank, p] : g.at) {
      if (p->seq == g.latest) by_op[p->op].push_back(rank);
    }
    if (by_op.size() < 2) continue;
    std::string calls;
    size_t fewest = s.ranks.size();
    for (const auto& [op, ranks] : by_op) {
      calls += (calls.empty() ? "" : ", ") + RanksNoun(ranks) + " " + op;
      fewest = std::min(fewest, ranks.size());
    }
    side.state = "the ranks called different collectives as #" + std::to_string(g.latest) +
                 g.label + ": " + calls;
    side.verdict = side.state + ": a collective mismatch, each waits for the others in its own";
    // The ranks of the one rarest call stray from the others (a tie blames none).
    std::vector<const std::vector<int>*> rarest;
    for (const auto& [op, ranks] : by_op) {
      if (ranks.size() == fewest) rarest.push_back(&ranks);
    }
    if (rarest.size() == 1) side.laggards = *rarest[0];
    return true;
  }
  return false;
}

// Each laggard with the newest collectives it did not enter: "rank 1 did not
// enter X (rank 0 waits in it), nor Y"; laggards alike share a clause.
std::string LaggardVerdict(const Survey& s, const std::vector<int>& laggards) {
  std::vector<std::pair<std::string, std::vector<int>>> clauses;  // what was missed -> who
  for (int r : laggards) {
    std::string missed;
    for (const auto& [name, g] : s.groups) {
      if (!g.Behind(r)) continue;
      const std::vector<int> waiting = g.WaitingIn();
      missed += (missed.empty() ? "enter " : ", nor ") + g.Newest();
      if (!waiting.empty()) missed += " (" + RanksNoun(waiting) + WaitVerb(waiting) + " in it)";
    }
    std::string posted;  // the p2p operations that wait for it
    for (const auto& [waiter, ops] : s.p2p) {
      for (const TorchProgress* p : ops) {
        const std::vector<int> peers = Awaited(s, *p);
        if (!std::count(peers.begin(), peers.end(), r)) continue;
        const std::string w = "rank " + std::to_string(waiter);
        posted += std::string(posted.empty() ? "post " : ", nor ") + "the " +
                  (p->op == "send" ? "recv" : "send") + " for " + w + "'s " + P2pName(*p) + " (" +
                  w + " waits in it)";
      }
    }
    if (!posted.empty()) missed += (missed.empty() ? "" : ", nor ") + posted;
    auto same = std::find_if(clauses.begin(), clauses.end(),
                             [&](const auto& c) { return c.first == missed; });
    if (same == clauses.end()) {
      clauses.push_back({missed, {r}});
    } else {
      same->second.push_back(r);
    }
  }
  std::string out;
  for (const auto& [missed, ranks] : clauses) {
    out += (out.empty() ? "" : "; ") + RanksNoun(ranks) + " did not " + missed;
  }
  return out;
}

bool AwaitedByP2p(const Survey& s, int rank) {
  return std::any_of(s.p2p.begin(), s.p2p.end(), [&](const auto& waiter) {
    return std::any_of(waiter.second.begin(), waiter.second.end(), [&](const TorchProgress* p) {
      const std::vector<int> peers = Awaited(s, *p);
      return std::count(peers.begin(), peers.end(), rank) > 0;
    });
  });
}

// Whether `rank` waits inside a collective (its newest, entered).
bool InCollective(const Survey& s, int rank) {
  const auto it = s.newest.find(rank);
  return it != s.newest.end() && it->second->entered;
}

// "rank 0 waits in send to rank 1" or "rank 1 waits in X for rank 0".
std::string WaitClause(const Survey& s, int rank) {
  const std::string who = RanksNoun({rank}) + " waits in ";
  if (const auto p2p = s.p2p.find(rank); p2p != s.p2p.end()) {
    std::string ops;
    for (const TorchProgress* p : p2p->second) ops += (ops.empty() ? "" : " and ") + P2pName(*p);
    return who + ops;
  }
  const TorchProgress& p = *s.newest.at(rank);
  return who + Collective(p, s.groups.at(p.group).label) + " for " + RanksNoun(WaitsFor(s, rank));
}

// Every rank that is blocked waits for another: they wait for each other.
// The ranks they wait for that wait inside a collective are in the circle too.
void Deadlock(const Survey& s, std::vector<int> circle, TorchSide& side) {
  for (size_t i = 0; i < circle.size(); ++i) {
    for (int q : WaitsFor(s, circle[i])) {
      const bool waits = InCollective(s, q) || s.InP2p(q);
      if (waits && !WaitsFor(s, q).empty() && !std::count(circle.begin(), circle.end(), q)) {
        circle.push_back(q);
      }
    }
  }
  std::sort(circle.begin(), circle.end());
  // The ranks on a cycle of waits: the others only wait for one of them.
  for (int r : circle) {
    std::vector<int> todo = WaitsFor(s, r), seen;
    bool back = false;
    while (!todo.empty() && !back) {
      const int q = todo.back();
      todo.pop_back();
      back = q == r;
      if (back || std::count(seen.begin(), seen.end(), q)) continue;
      seen.push_back(q);
      for (int next : WaitsFor(s, q)) todo.push_back(next);
    }
    if (back) side.deadlocked.push_back(r);
  }
  if (side.deadlocked.empty()) side.deadlocked = circle;
  for (int r : circle) side.state += (side.state.empty() ? "" : "; ") + WaitClause(s, r);
  side.state = RanksNoun(circle) + " wait for each other: " + side.state;
  const bool p2p = std::any_of(circle.begin(), circle.end(), [&](int r) { return s.InP2p(r); });
  side.verdict = side.state + ": a deadlock, the ranks call the " +
                 (p2p ? "collectives and point-to-point operations" : "collectives") +
                 " of their process groups in different orders";
}

// No rank fell behind: where each rank's newest collective stands.
void Standing(const Survey& s, TorchSide& side) {
  std::map<std::string, std::vector<int>> waiting, finished;  // collective -> ranks
  for (const auto& [rank, p] : s.newest) {
    (p->entered ? waiting : finished)[Collective(*p, s.groups.at(p->group).label)].push_back(rank);
  }
  if (waiting.size() + finished.size() == 1 ||
      (waiting.size() == 1 && finished.size() == 1 &&
       waiting.begin()->first == finished.begin()->first)) {
    const std::string newest = (waiting.empty() ? finished : waiting).begin()->first;
    if (finished.empty()) {
      side.state = "every local rank waits in " + newest;
      side.all_waiting = true;
      side.verdict = side.state +
                     ": the collective itself is stuck, or a rank on another node never entered it";
      return;
    }
    side.state = RanksNoun(finished.begin()->second) + " finished " + newest;
    if (!waiting.empty()) {
      side.state += " and " + RanksNoun(waiting.begin()->second) + " wait in it";
    }
    side.verdict = side.state + ": the hang is outside PyTorch's collectives";
    return;
  }
  for (const auto& [collective, ranks] : waiting) {
    side.state +=
        (side.state.empty() ? "" : "; ") + RanksNoun(ranks) + WaitVerb(ranks) + " in " + collective;
  }
  for (const auto& [collective, ranks] : finished) {
    side.state += (side.state.empty() ? "" : "; ") + RanksNoun(ranks) + " finished " + collective;
  }
  side.verdict =
      side.state + (finished.empty() ? ": those collectives are stuck, or ranks on another node "
                                       "never entered them"
                                     : ": the hang is outside PyTorch's collectives");
}

// Ranks in p2p operations that no local rank is to blame for: both sides
// posted, or the peer is on another node.
void P2pStanding(const Survey& s, TorchSide& side) {
  if (s.p2p.empty()) return;
  std::string waits;
  for (const auto& [r, ops] : s.p2p) waits += (waits.empty() ? "" : "; ") + WaitClause(s, r);
  const std::string meaning =
      ": the transfers themselves are stuck, or their peers on another node never posted theirs";
  if (s.newest.empty()) {
    side.state = waits;
    side.verdict = waits + meaning;
    return;
  }
  side.state = waits + "; " + side.state;
  side.verdict = waits + meaning + "; " + side.verdict;
}

void Describe(const Survey& s, TorchSide& side) {
  for (const auto& [name, raised] : s.raised) {
    std::vector<int> ranks;
    for (const TorchProgress* p : raised) ranks.push_back(p->rank);
    side.text += "  " + raised.front()->op + Label(*raised.front()) + " raised on " +
                 RanksNoun(ranks) +
                 ": its calls are not compared (the ranks' counts of them differ since)\n";
  }
  for (int r : s.ranks) {
    const std::string rank = "  rank " + std::to_string(r);
    if (const auto p2p = s.p2p.find(r); p2p != s.p2p.end()) {
      for (const TorchProgress* p : p2p->second) {
        side.text += rank + " waits in " + P2pName(*p) + Label(*p) +
                     " (point to point, which Gloo's flight recorder leaves out)\n";
      }
    }
    if (!s.newest.count(r)) {
      side.text += rank + ": no collective recorded\n";
      continue;
    }
    for (const auto& [name, g] : s.groups) {
      if (!g.Has(r)) continue;
      const auto it = g.at.find(r);
      if (it == g.at.end()) {
        side.text += rank + " did not enter " + g.Newest() + ": none of this group's yet\n";
        continue;
      }
      const TorchProgress& p = *it->second;
      const std::string last = Collective(p, "");
      if (g.progressing && p.seq < g.latest) {
        side.text +=
            rank + " is at " + last + g.label + ": its group makes progress (every member beats)\n";
      } else if (p.seq < g.latest) {
        side.text += rank + " did not enter " + g.Newest() + ": its last is " + last +
                     (p.entered ? " (entered)" : " (finished)") + "\n";
      } else {
        side.text += rank + (p.entered ? " waits in " : " finished ") + last + g.label + "\n";
      }
    }
  }
}

}  // namespace

TorchSide NameLaggards(const std::vector<TorchProgress>& progress,
                       const std::vector<int>& beating) {
  TorchSide side;
  side.text = "pytorch collectives (ddprun's hook on the flight recorder):\n";
  const Survey s = Gather(progress, beating);
  Describe(s, side);
  if (s.newest.empty() && s.p2p.empty()) {
    side.none_recorded = true;
    side.verdict = side.state =
        "no rank recorded a collective yet: the hang is before the first one";
    return side;
  }
  if (!Mismatch(s, side)) {
    // Behind in some group, or awaited by a p2p operation, and waiting for no
    // one: a cause. The others behind, or in a p2p operation, are blocked.
    std::vector<int> blocked;
    for (int r : s.ranks) {
      // A rank without a record lags only where another waits: elsewhere its
      // hook may have recorded nothing (the others finished what it missed).
      const bool silent = std::count(s.silent.begin(), s.silent.end(), r) > 0;
      const bool lags = std::any_of(s.groups.begin(), s.groups.end(), [&](const auto& g) {
        return g.second.Behind(r) && (!silent || !g.second.WaitingIn().empty());
      });
      if (!lags && !s.InP2p(r) && !AwaitedByP2p(s, r)) continue;
      const std::vector<int> awaited = WaitsFor(s, r);
      const bool waits_here = std::any_of(awaited.begin(), awaited.end(), [&](int q) {
        return std::count(s.ranks.begin(), s.ranks.end(), q) > 0;
      });
      if (waits_here) {
        blocked.push_back(r);
      } else if (awaited.empty() && !s.InP2p(r) && (lags || !InCollective(s, r))) {
        side.laggards.push_back(r);
      }  // else it waits for a rank on another node, or in a transfer both sides posted
    }
    if (!side.laggards.empty()) {
      side.verdict = LaggardVerdict(s, side.laggards);
    } else if (!blocked.empty()) {
      Deadlock(s, blocked, side);
    } else {
      if (!s.newest.empty()) Standing(s, side);
      P2pStanding(s, side);
    }
  }
  if (side.state.empty()) side.state = side.verdict;
  std::vector<int> unnamed;  // without a record, and not named above
  for (int r : s.silent) {
    if (!std::count(side.laggards.begin(), side.laggards.end(), r)) unnamed.push_back(r);
  }
  if (!unnamed.empty()) {
    side.verdict += "; " + RanksNoun(unnamed) + " recorded none";
    side.state += "; " + RanksNoun(unnamed) + " recorded none";
  }
  return side;
}

}  // namespace ddprun::supervisor
