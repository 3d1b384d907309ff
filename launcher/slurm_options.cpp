#include "launcher/slurm_options.hpp"

#include <spdlog/spdlog.h>

#include <set>
#include <utility>
#include <vector>

#include "env/host.hpp"
#include "env/slurm.hpp"
#include "supervisor/exit_status.hpp"

namespace ddprun::launcher {

namespace {

// "--nnodes=2 --node_rank=1 ..." for the options Slurm filled in.
std::string Described(const std::vector<std::pair<std::string, std::string>>& filled) {
  std::string out;
  for (const auto& [name, value] : filled) out += (out.empty() ? "--" : " --") + name + "=" + value;
  return out;
}

// The step's agents: one per node, each starting --nproc_per_node workers.
Status CheckOneAgentPerNode(const env::SlurmStep& step) {
  const int here = step.TasksOnThisNode();
  if (here <= 1 && step.num_tasks <= step.num_nodes) return Status::Ok();
  return InvalidArgument(
      "this Slurm step starts " + std::to_string(step.num_tasks) + " ddprun agents on " +
      std::to_string(step.num_nodes) + " node(s) (" + std::to_string(here) + " on " +
      (step.node_name.empty() ? std::string("this node") : step.node_name) +
      "; SLURM_STEP_TASKS_PER_NODE), but ddprun is one agent per node that starts the workers "
      "itself: run srun --ntasks-per-node=1 (inside sbatch or salloc also -n $SLURM_NNODES) and "
      "give the workers per node with --nproc_per_node; --slurm=off ignores the step");
}

// An explicit --nnodes against the step's nodes. Fewer nodes than the step
// has are refused (N=1: every node would run a 1-node job of its own; else
// the nodes past N have no node rank). More: the step is one of several that
// make the job (one srun per node, a het job's components), so the step says
// neither this node's rank nor the store's host: those must be given, and
// the result is true (nothing but the signals and the report comes from the
// step).
StatusOr<bool> CheckNnodes(const std::string& given, const env::SlurmStep& step,
                           const RawOptions& raw, ParsedCommandLine& parsed) {
  LaunchConfig probe;
  if (Status s = ParseNnodes(given, probe); !s.ok()) return s;
  const std::string nodes = std::to_string(step.num_nodes);
  const std::string where =
      "this Slurm step has " + nodes + " node(s) (SLURM_STEP_NUM_NODES=" + nodes + ")";
  const std::string off = "; --slurm=off ignores the step";
  if (probe.nnodes_max < step.num_nodes) {
    if (probe.nnodes_min != probe.nnodes_max) {
      parsed.notices.push_back("--nnodes=" + given + " does not include " + nodes + ": " + where +
                               ", so the job leaves the nodes beyond the maximum waiting");
      return false;
    }
    const std::string what = probe.nnodes_max == 1
                                 ? "every node would run a 1-node job of its own"
                                 : "its nodes past " + std::to_string(probe.nnodes_max) +
                                       " would have no node rank in the job";
    return Bad("nnodes", given,
               where + " and " + what + ": drop --nnodes (ddprun takes it from the step), or run " +
                   "srun -N" + std::to_string(probe.nnodes_max) + off);
  }
  if (probe.nnodes_min <= step.num_nodes) return false;
  // The job's other nodes come from other steps.
  const bool c10d = raw.Said("rdzv_backend").value_or("static") == "c10d";
  std::string missing;
  if (c10d && !raw.Said("rdzv_endpoint")) missing = "--rdzv_endpoint";
  if (!c10d && !raw.Said("node_rank")) missing = "--node_rank";
  if (!c10d && !raw.Said("master_addr") && !raw.Said("rdzv_endpoint")) {
    missing += (missing.empty() ? "" : " and ") + std::string("--master_addr");
  }
  const std::string others = where + ", fewer than --nnodes=" + given +
                             ": the job's other nodes come from other steps (one srun per "
                             "node), and the step tells neither this node's rank nor where the "
                             "store is";
  if (!missing.empty()) {
    return Bad("nnodes", given,
               others + ": give " + missing + ", or drop --nnodes and run srun -N" +
                   std::to_string(probe.nnodes_min) + " --ntasks-per-node=1 ddprun ..." + off);
  }
  parsed.notices.push_back(others + ": they come from the options given");
  return true;
}

}  // namespace

// --slurm: inside a job step, what the step says fills in what the user did not.
Status ApplySlurm(RawOptions& raw, const env::Environ& environ, ParsedCommandLine& parsed) {
  std::string mode = raw.Said("slurm").value_or("auto");
  auto m = ParseWord("slurm", mode);
  if (!m.ok()) return raw.NameEnvironmentSource(m.status());
  if (mode == "off") return Status::Ok();
  auto read = env::ReadSlurmStep(environ);
  if (!read.ok()) return read.status().Annotate("--slurm=" + mode + " (--slurm=off ignores it)");
  if (!read->has_value()) {
    if (mode == "node") {
      return InvalidArgument(
          "--slurm=node: this is not a Slurm job step (SLURM_STEP_ID is not set): start ddprun "
          "with srun --ntasks-per-node=1, or drop --slurm");
    }
    auto nodes = env::Lookup(environ, env::kSlurmNnodes);
    parsed.config.slurm_outside_step = env::Lookup(environ, env::kSlurmJobId).has_value();
    if (env::Lookup(environ, env::kSlurmJobId) && nodes && *nodes != "1" && !raw.Said("nnodes")) {
      parsed.notices.push_back(
          "this Slurm job has " + *nodes +
          " nodes (SLURM_NNODES) but ddprun runs outside a job "
          "step, so only this node's workers start: launch it with srun --ntasks-per-node=1 -n " +
          *nodes + " ddprun ...");
    }
    return Status::Ok();
  }
  const env::SlurmStep& step = **read;
  if (Status s = CheckOneAgentPerNode(step); !s.ok()) return s;
  std::vector<std::pair<std::string, std::string>> filled;
  auto fill = [&](const std::string& name, const std::string& value) {
    if (raw.Said(name)) return;
    raw.SetDefault(name, value);
    filled.emplace_back(name, value);
  };
  if (raw.Said("standalone") && step.num_nodes > 1) {
    return InvalidArgument("--standalone is a single-node job, but this Slurm step has " +
                           std::to_string(step.num_nodes) +
                           " nodes (SLURM_STEP_NUM_NODES): drop "
                           "--standalone (ddprun takes the rendezvous from the step), or run the "
                           "step on one node (srun -N1); --slurm=off ignores the step");
  }
  if (auto given = raw.Said("nnodes")) {
    auto part = CheckNnodes(*given, step, raw, parsed);
    if (!part.ok()) return part.status();
    if (*part) {
      parsed.config.slurm = step;
      return Status::Ok();
    }
  }
  fill("nnodes", std::to_string(step.num_nodes));
  // A node past --nnodes=MIN:MAX's maximum (a step larger than the job) waits to join with no
  // node rank to prefer: its SLURM_NODEID is none of the job's (attack 95: it exited 2 with
  // "invalid --node_rank", an option the user never gave, failing a step whose job succeeded).
  LaunchConfig probe;
  const bool beyond = raw.Said("nnodes") && ParseNnodes(*raw.Said("nnodes"), probe).ok() &&
                      step.node_id >= probe.nnodes_max;
  if (!beyond) fill("node_rank", std::to_string(step.node_id));
  fill("rdzv_id", step.Id());
  const bool multi_node = step.num_nodes > 1 || raw.Said("nnodes").value_or("1") != "1";
  const bool c10d = raw.Said("rdzv_backend").value_or("static") == "c10d";
  if (!step.first_host.empty() && !raw.Said("rdzv_endpoint") && !raw.Said("standalone")) {
    const std::string port = std::to_string(env::SlurmStepPort(step));
    if (c10d) {
      const bool ipv6 = step.first_host.find(':') != std::string::npos;
      fill("rdzv_endpoint", (ipv6 ? "[" + step.first_host + "]" : step.first_host) + ":" + port);
    } else if (multi_node) {
      fill("master_addr", step.first_host);
      fill("master_port", port);
    }
  }
  parsed.notices.push_back(
      "Slurm step " + step.Id() + ", node " + std::to_string(step.node_id) + " of " +
      std::to_string(step.num_nodes) + " (" + step.nodelist + ")" +
      (filled.empty() ? ": every rendezvous option was given" : ": " + Described(filled)) +
      (step.restart_count > 0 ? "; the job was requeued " + std::to_string(step.restart_count) +
                                    " time(s) (SLURM_RESTART_COUNT)"
                              : ""));
  parsed.config.slurm = step;
  for (const auto& [name, value] : filled) parsed.config.from_slurm.insert(name);
  return Status::Ok();
}

StatusOr<std::string> ResolveSlurmStoreHost(LaunchConfig& c) {
  const bool addr = c.from_slurm.count("master_addr") != 0;
  const bool endpoint = c.from_slurm.count("rdzv_endpoint") != 0;
  if (!c.slurm || (!addr && !endpoint)) return std::string();
  const std::string& host = c.slurm->first_host;
  if (env::Resolves(host)) return std::string();
  auto node_addr = env::ReadNodeAddr(host);
  if (!node_addr || *node_addr == host) {
    return InvalidArgument(
        "the step's first node " + host +
        " (SLURM_STEP_NODELIST), where the rendezvous store runs, does not resolve on this host "
        "and scontrol show node gave no other NodeAddr: give --master_addr (or --rdzv_endpoint) "
        "with an address every node can reach");
  }
  if (addr) c.master_addr = *node_addr;
  if (endpoint) {
    const std::string port = c.rdzv_endpoint.substr(c.rdzv_endpoint.rfind(':') + 1);
    const bool ipv6 = node_addr->find(':') != std::string::npos;
    c.rdzv_endpoint = (ipv6 ? "[" + *node_addr + "]" : *node_addr) + ":" + port;
  }
  return "Slurm node " + host + " does not resolve here: the store is at its NodeAddr " +
         *node_addr;
}

supervisor::Supervisor::SignalFilter SlurmSignalFilter(const LaunchConfig& c, bool own_cgroup) {
  if (!c.slurm || !env::SignalsReachDescendants(c.slurm_proctrack)) return nullptr;
  if (own_cgroup && c.slurm_proctrack == "proctrack/cgroup") return nullptr;
  return [proctrack = c.slurm_proctrack, said = std::set<int>()](int sig, pid_t sender) mutable {
    if (!env::IsAncestorSlurmstepd(sender)) return false;
    if (said.insert(sig).second) {
      spdlog::info(
          "{} from the step's slurmstepd (pid {}): Slurm signals every process of the step "
          "({}), the workers have it; ddprun does not send them a second copy",
          supervisor::SignalName(sig), sender, proctrack);
    }
    return true;
  };
}

}  // namespace ddprun::launcher
