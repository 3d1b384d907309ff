// NameLaggards: the verdict on PyTorch's side of a hang, from each rank's last
// collective in each process group (ReadTorchProgress).
//
// Sequence numbers count per process group, so they are compared only within
// one. A rank that waits inside a collective of one group for a member that
// never entered it falls behind in every other group it belongs to; it is
// blocked, not a cause. The causes are the ranks that fell behind and wait
// for no one; when every rank that fell behind waits for another, they wait
// for each other (a deadlock).
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
  std::string Newest() const { return op + " #" + std::to_string(latest) + label; }
  long SeqOf(int rank) const {  // 0: a member that never entered one of its collectives
    const auto it = at.find(rank);
    return it == at.end() ? 0 : it->second->seq;
  }
  bool Has(int rank) const { return std::count(members.begin(), members.end(), rank) > 0; }
  bool Behind(int rank) const { return Has(rank) && SeqOf(rank) < latest; }
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
  std::vector<int> silent;                     // recorded no collective
  std::map<int, const TorchProgress*> newest;  // each rank's newest, any group
  std::map<std::string, Group> groups;
};

Survey Gather(const std::vector<TorchProgress>& progress) {
  Survey s;
  for (const TorchProgress& p : progress) {
    if (std::find(s.ranks.begin(), s.ranks.end(), p.rank) == s.ranks.end()) {
      s.ranks.push_back(p.rank);
    }
    if (p.seq < 0) continue;
    s.newest[p.rank] = &p;  // the hook writes the newest last
    Group& g = s.groups[p.group];
    g.at[p.rank] = &p;
    g.label = Label(p);
    if (p.seq > g.latest) g.latest = p.seq, g.op = p.op;
  }
  for (int r : s.ranks) {
    if (!s.newest.count(r)) s.silent.push_back(r);
  }
  for (auto& [name, g] : s.groups) {
    const TorchProgress& any = *g.at.begin()->second;
    for (int r : s.ranks) {
      const bool member = g.at.count(r) ||
                          (s.newest.count(r) &&
                           (any.everyone || std::count(any.members.begin(), any.members.end(), r)));
      if (member) g.members.push_back(r);
    }
  }
  return s;
}

// The members of the group that `rank` waits in which did not enter that
// collective; empty when it waits for no local rank, or does not wait.
std::vector<int> WaitsFor(const Survey& s, int rank) {
  const auto it = s.newest.find(rank);
  if (it == s.newest.end() || !it->second->entered) return {};
  const TorchProgress& p = *it->second;
  const Group& g = s.groups.at(p.group);
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
      missed += (missed.empty() ? "" : ", nor ") + g.Newest();
      if (!waiting.empty()) missed += " (" + RanksNoun(waiting) + WaitVerb(waiting) + " in it)";
    }
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
    out += (out.empty() ? "" : "; ") + RanksNoun(ranks) + " did not enter " + missed;
  }
  return out;
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

void Describe(const Survey& s, TorchSide& side) {
  for (int r : s.ranks) {
    const std::string rank = "  rank " + std::to_string(r);
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
      if (p.seq < g.latest) {
        side.text += rank + " did not enter " + g.Newest() + ": its last is " + last +
                     (p.entered ? " (entered)" : " (finished)") + "\n";
      } else {
        side.text += rank + (p.entered ? " waits in " : " finished ") + last + g.label + "\n";
      }
    }
  }
}

}  // namespace

TorchSide NameLaggards(const std::vector<TorchProgress>& progress) {
  TorchSide side;
  side.text = "pytorch collectives (ddprun's hook on the flight recorder):\n";
  const Survey s = Gather(progress);
  Describe(s, side);
  if (s.newest.empty()) {
    side.verdict = side.state =
        "no rank recorded a collective yet: the hang is before the first one";
    return side;
  }
  if (!Mismatch(s, side)) {
    // Behind in some group, and waiting for no one: a cause.
    std::vector<int> behind;
    for (int r : s.ranks) {
      const bool lags = std::any_of(s.groups.begin(), s.groups.end(),
                                    [&](const auto& g) { return g.second.Behind(r); });
      if (!lags) continue;
      behind.push_back(r);
      if (WaitsFor(s, r).empty()) side.laggards.push_back(r);
    }
    if (!side.laggards.empty()) {
      side.verdict = LaggardVerdict(s, side.laggards);
    } else if (!behind.empty()) {
      for (int r : behind) {
        const TorchProgress& p = *s.newest.at(r);
        side.state += (side.state.empty() ? "" : "; ") + RanksNoun({r}) + " waits in " +
                      Collective(p, s.groups.at(p.group).label) + " for " +
                      RanksNoun(WaitsFor(s, r));
      }
      side.state = RanksNoun(behind) + " wait for each other: " + side.state;
      side.verdict = side.state +
                     ": a deadlock, the ranks call the collectives of their process groups in "
                     "different orders";
    } else {
      Standing(s, side);
    }
  }
  if (side.state.empty()) side.state = side.verdict;
  if (!s.silent.empty()) {
    side.verdict += "; " + RanksNoun(s.silent) + " recorded none";
    side.state += "; " + RanksNoun(s.silent) + " recorded none";
  }
  return side;
}

}  // namespace ddprun::supervisor
