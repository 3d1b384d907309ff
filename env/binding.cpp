#include "env/binding.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace ddprun::env {
namespace {

// The planning context: the topology restricted to the allowed CPUs.
struct Usable {
  const Topology& topo;
  CpuList cpus;            // allowed and known to the topology
  std::vector<int> nodes;  // nodes with at least one usable CPU, ascending
  CpuList In(int node) const { return Intersect(topo.NodeCpus(node), cpus); }
};

Usable MakeUsable(const Topology& topo, const CpuList& allowed) {
  Usable u{topo, {}, {}};
  for (const auto& p : topo.cpus) {
    if (std::binary_search(allowed.begin(), allowed.end(), p.cpu)) u.cpus.push_back(p.cpu);
  }
  for (int node : topo.nodes) {
    if (!u.In(node).empty()) u.nodes.push_back(node);
  }
  return u;
}

// `cpus` ordered so that neighbours share a node, a package and a core.
CpuList LocalityOrder(const Topology& topo, CpuList cpus) {
  auto key = [&topo](int c) {
    const CpuPlace* p = topo.Find(c);
    return std::make_tuple(p->node, p->package, p->core, c);
  };
  std::sort(cpus.begin(), cpus.end(), [&key](int a, int b) { return key(a) < key(b); });
  return cpus;
}

// `ordered` cut into `parts` consecutive runs, the first size % parts one
// longer; each run ascending.
std::vector<CpuList> Cut(const CpuList& ordered, int parts) {
  std::vector<CpuList> runs(static_cast<size_t>(parts));
  const size_t n = ordered.size(), p = static_cast<size_t>(parts);
  size_t at = 0;
  for (size_t i = 0; i < p; ++i) {
    const size_t len = n / p + (i < n % p ? 1 : 0);
    runs[i].assign(ordered.begin() + static_cast<long>(at),
                   ordered.begin() + static_cast<long>(at + len));
    std::sort(runs[i].begin(), runs[i].end());
    at += len;
  }
  return runs;
}

std::optional<int> GpuNode(const BindingRequest& req, int index) {
  if (index >= static_cast<int>(req.gpu_nodes.size())) return std::nullopt;
  const auto& node = req.gpu_nodes[static_cast<size_t>(index)];
  if (!node) return std::nullopt;
  return std::max(*node, 0);
}

bool AnyGpuNode(const BindingRequest& req) {
  for (int r = 0; r < req.nproc; ++r) {
    if (GpuNode(req, r)) return true;
  }
  return false;
}

// --numa_binding: the node of each GPU index (local ranks first, then GPUs no
// rank drives). A rank without GPU information is placed as torchrun's GPUs
// usually are: consecutive ranks in blocks over the usable nodes.
std::vector<std::optional<int>> NumaHomes(const Usable& u, const BindingRequest& req) {
  const int n = std::max(req.nproc, static_cast<int>(req.gpu_nodes.size()));
  std::vector<std::optional<int>> home(static_cast<size_t>(n));
  const size_t nodes = u.nodes.size();
  for (int i = 0; i < n; ++i) {
    home[static_cast<size_t>(i)] = GpuNode(req, i);
    if (!home[static_cast<size_t>(i)] && i < req.nproc) {
      home[static_cast<size_t>(i)] =
          u.nodes[static_cast<size_t>(i) * nodes / static_cast<size_t>(req.nproc)];
    }
  }
  return home;
}

Status NoCpusOnNode(const BindingRequest& req, int rank, int node) {
  return InvalidArgument(BindModeName(req.mode) + ": local rank " + std::to_string(rank) +
                         " belongs to NUMA node " + std::to_string(node) +
                         ", which has none of the allowed CPUs " + FormatCpuList(req.allowed) +
                         ": run ddprun with an affinity (taskset, cpuset) that includes node " +
                         std::to_string(node) + ", or use --cpu_binding");
}

// The lowest usable CPU's package: how torchrun finds a node's socket.
int PackageOf(const Usable& u, int node) { return u.topo.Find(u.In(node).front())->package; }

CpuList SocketCpus(const Usable& u, int node) {
  CpuList out;
  for (int n : u.nodes) {
    if (PackageOf(u, n) != PackageOf(u, node)) continue;
    CpuList in = u.In(n);
    out.insert(out.end(), in.begin(), in.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The usable CPUs of `node` grouped by `key`, groups ordered by their lowest CPU.
template <typename Key>
std::vector<CpuList> GroupBy(const Usable& u, int node, Key key) {
  std::map<decltype(key(u.topo.cpus.front())), CpuList> groups;
  for (int c : u.In(node)) groups[key(*u.topo.Find(c))].push_back(c);
  std::vector<CpuList> out;
  for (auto& [k, cpus] : groups) out.push_back(std::move(cpus));
  std::sort(out.begin(), out.end());
  return out;
}

// torchrun's exclusive mode: the node's physical cores split among the GPUs
// on it in index order, the first cores % gpus GPUs one core more.
StatusOr<CpuList> Exclusive(const Usable& u, const BindingRequest& req, int node, int peer,
                            int peers) {
  auto cores = GroupBy(u, node, [](const CpuPlace& p) { return std::pair(p.package, p.core); });
  if (static_cast<int>(cores.size()) < peers) {
    return InvalidArgument(BindModeName(req.mode) + ": NUMA node " + std::to_string(node) +
                           " has " + std::to_string(cores.size()) +
                           " physical cores among the allowed CPUs for its " +
                           std::to_string(peers) +
                           (AnyGpuNode(req) ? " GPUs" : " local ranks (no GPU locality known)") +
                           ": use --numa_binding=node, or allow more CPUs");
  }
  CpuList out;
  const int per = static_cast<int>(cores.size()) / peers;
  const int extra = static_cast<int>(cores.size()) % peers;
  const int start = peer * per + std::min(peer, extra);
  const int end = start + per + (peer < extra ? 1 : 0);
  for (int i = start; i < end; ++i) {
    const CpuList& core = cores[static_cast<size_t>(i)];
    out.insert(out.end(), core.begin(), core.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// torchrun's core-complex mode: one L3 group of the node, the fullest first,
// the k-th GPU on the node taking group k mod groups.
CpuList CoreComplex(const Usable& u, int node, int peer) {
  auto groups = GroupBy(u, node, [](const CpuPlace& p) { return p.l3; });
  std::stable_sort(groups.begin(), groups.end(),
                   [](const CpuList& a, const CpuList& b) { return a.size() > b.size(); });
  return groups[static_cast<size_t>(peer) % groups.size()];
}

StatusOr<CpuList> NumaRank(const Usable& u, const BindingRequest& req,
                           const std::vector<std::optional<int>>& home, int rank) {
  const int node = *home[static_cast<size_t>(rank)];
  if (u.In(node).empty()) return NoCpusOnNode(req, rank, node);
  int peer = 0, peers = 0;
  for (size_t i = 0; i < home.size(); ++i) {
    if (home[i] != node) continue;
    if (static_cast<int>(i) < rank) ++peer;
    ++peers;
  }
  switch (req.mode) {
    case BindMode::kNumaSocket:
      return SocketCpus(u, node);
    case BindMode::kNumaExclusive:
      return Exclusive(u, req, node, peer, peers);
    case BindMode::kNumaCoreComplex:
      return CoreComplex(u, node, peer);
    default:
      return u.In(node);
  }
}

StatusOr<BindingPlan> PlanNuma(const Usable& u, const BindingRequest& req) {
  BindingPlan plan;
  if (!AnyGpuNode(req) && u.nodes.size() > 1) {
    plan.notes.push_back("no GPU locality known: local ranks laid over NUMA nodes in blocks");
  }
  const auto home = NumaHomes(u, req);
  for (int r = 0; r < req.nproc; ++r) {
    auto cpus = NumaRank(u, req, home, r);
    if (!cpus.ok()) return cpus.status();
    plan.ranks.push_back(std::move(*cpus));
  }
  return plan;
}

// Fewer CPUs than ranks: each rank gets one CPU, round robin.
BindingPlan Shared(const Usable& u, const BindingRequest& req) {
  BindingPlan plan;
  const CpuList order = LocalityOrder(u.topo, u.cpus);
  for (int r = 0; r < req.nproc; ++r) plan.ranks.push_back({order[r % order.size()]});
  plan.warnings.push_back(BindModeName(req.mode) + ": " + std::to_string(order.size()) +
                          " allowed CPU(s) (" + FormatCpuList(u.cpus) + ") for " +
                          std::to_string(req.nproc) +
                          " local ranks: ranks share CPUs, one CPU each; allow at least " +
                          std::to_string(req.nproc) + " CPUs or run fewer workers");
  return plan;
}

// Equal runs of the CPUs in locality order; when every rank's GPU node is
// known, runs go to ranks ordered by that node, so that they tend to land on it.
BindingPlan Compact(const Usable& u, const BindingRequest& req) {
  std::vector<int> order(static_cast<size_t>(req.nproc));
  for (int r = 0; r < req.nproc; ++r) order[static_cast<size_t>(r)] = r;
  bool all_known = true;
  for (int r = 0; r < req.nproc; ++r) all_known = all_known && GpuNode(req, r).has_value();
  if (all_known) {
    std::stable_sort(order.begin(), order.end(),
                     [&req](int a, int b) { return *GpuNode(req, a) < *GpuNode(req, b); });
  }
  const auto runs = Cut(LocalityOrder(u.topo, u.cpus), req.nproc);
  BindingPlan plan;
  plan.ranks.resize(static_cast<size_t>(req.nproc));
  for (size_t i = 0; i < order.size(); ++i) plan.ranks[static_cast<size_t>(order[i])] = runs[i];
  return plan;
}

// How many ranks each node takes: GPU ranks on their node while it has CPUs
// to spare, the others where CPUs per rank stays highest, in blocks.
std::vector<int> SpreadNodes(const Usable& u, const BindingRequest& req) {
  std::map<int, int> cap, count;
  for (int n : u.nodes) cap[n] = static_cast<int>(u.In(n).size());
  std::vector<int> node_of(static_cast<size_t>(req.nproc), -1);
  int unplaced = 0;
  for (int r = 0; r < req.nproc; ++r) {
    auto g = GpuNode(req, r);
    if (g && cap.count(*g) != 0 && count[*g] < cap[*g]) {
      node_of[static_cast<size_t>(r)] = *g;
      ++count[*g];
    } else {
      ++unplaced;
    }
  }
  std::map<int, int> extra;
  for (int i = 0; i < unplaced; ++i) {
    int best = -1;
    for (int n : u.nodes) {
      const int c = count[n] + extra[n];
      if (c >= cap[n]) continue;
      // cap[n] / (c + 1) > cap[best] / (cb + 1), in integers.
      if (best < 0 || static_cast<long long>(cap[n]) * (count[best] + extra[best] + 1) >
                          static_cast<long long>(cap[best]) * (c + 1)) {
        best = n;
      }
    }
    ++extra[best];
  }
  size_t next = 0;
  for (int r = 0; r < req.nproc; ++r) {
    if (node_of[static_cast<size_t>(r)] >= 0) continue;
    while (extra[u.nodes[next]] == 0) ++next;
    node_of[static_cast<size_t>(r)] = u.nodes[next];
    --extra[u.nodes[next]];
  }
  return node_of;
}

BindingPlan Spread(const Usable& u, const BindingRequest& req) {
  if (req.nproc < static_cast<int>(u.nodes.size()) && !AnyGpuNode(req)) return Compact(u, req);
  const auto node_of = SpreadNodes(u, req);
  BindingPlan plan;
  plan.ranks.resize(static_cast<size_t>(req.nproc));
  for (int n : u.nodes) {
    std::vector<int> ranks;
    for (int r = 0; r < req.nproc; ++r) {
      if (node_of[static_cast<size_t>(r)] == n) ranks.push_back(r);
    }
    if (ranks.empty()) continue;
    const auto runs = Cut(LocalityOrder(u.topo, u.In(n)), static_cast<int>(ranks.size()));
    for (size_t i = 0; i < ranks.size(); ++i) plan.ranks[static_cast<size_t>(ranks[i])] = runs[i];
  }
  for (int r = 0; r < req.nproc; ++r) {
    auto g = GpuNode(req, r);
    if (g && node_of[static_cast<size_t>(r)] != *g) {
      plan.notes.push_back("local rank " + std::to_string(r) + " placed off its GPU's NUMA node " +
                           std::to_string(*g) + ": that node has too few allowed CPUs");
    }
  }
  return plan;
}

}  // namespace

std::string BindModeName(BindMode mode) {
  switch (mode) {
    case BindMode::kNone:
      return "none";
    case BindMode::kNumaNode:
      return "--numa_binding=node";
    case BindMode::kNumaSocket:
      return "--numa_binding=socket";
    case BindMode::kNumaExclusive:
      return "--numa_binding=exclusive";
    case BindMode::kNumaCoreComplex:
      return "--numa_binding=core-complex";
    case BindMode::kSpread:
      return "--cpu_binding=spread";
    case BindMode::kCompact:
      return "--cpu_binding=compact";
  }
  return "none";
}

StatusOr<BindingPlan> PlanBinding(const Topology& topology, const BindingRequest& req) {
  if (req.mode == BindMode::kNone) return BindingPlan{};
  const Usable u = MakeUsable(topology, req.allowed);
  if (u.cpus.empty()) {
    return InvalidArgument(BindModeName(req.mode) + ": none of the allowed CPUs " +
                           FormatCpuList(req.allowed) +
                           " is in the machine's topology: drop the option");
  }
  switch (req.mode) {
    case BindMode::kSpread:
    case BindMode::kCompact:
      if (static_cast<int>(u.cpus.size()) < req.nproc) return Shared(u, req);
      return req.mode == BindMode::kSpread ? Spread(u, req) : Compact(u, req);
    default:
      return PlanNuma(u, req);
  }
}

std::vector<int> ThreadsPerRank(const std::vector<CpuList>& ranks) {
  std::vector<int> threads;
  for (const auto& mine : ranks) {
    const auto same = std::count(ranks.begin(), ranks.end(), mine);
    threads.push_back(std::max(1, static_cast<int>(mine.size() / static_cast<size_t>(same))));
  }
  return threads;
}

std::string DescribePlan(const BindingPlan& plan) {
  std::string out;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    if (r > 0) out += ", ";
    out += "local rank " + std::to_string(r) + ": " + FormatCpuList(plan.ranks[r]);
  }
  return out;
}

}  // namespace ddprun::env
