// Rendezvous simulation: N agents as threads against the real store server
// and the real coordinator, in one process (bench/rendezvous_bench.py drives
// it; it also runs alone).
//
//   rendezvous_sim [--runs R] [--raw] N [N ...]
//
// For each N and each run: a fresh StoreServer on 127.0.0.1 (kernel-picked
// port) and a Coordinator on its own StoreClient with RendezvousSettings
// min = max = N (run_id "bench", join_timeout 120 s), started as the hosting
// agent starts them (launcher/agent.cpp Setup). Then N threads each
// AgentDriver::Connect with its own NodeInfo (same host name, addr 127.0.0.1,
// a fake worker store port), and wait at a gate until all N are connected.
// The gate opens; each thread takes a steady_clock stamp right before its
// first Next(), and one when Next() says to start the workers (node rank 0
// cleared its worker store, which the others waited for: what an agent does
// before it starts its workers), and each takes a stamp then.
//
//   rdzv     = last "cleared" stamp - last NextRound-start stamp
//              (the analogue of "last agent started -> every worker running")
//   release  = last "cleared" stamp - gate opening (includes waking N threads)
//   connect  = time for the N Connects (VALIDATE + PING each), for information
//
// Not simulated: process start, the agent's own stores (rank 0 does not
// Clear a worker store: there is none), worker spawn, keep-alives.
//
// Checks per run: every thread got round 0, world size N, N members, node
// ranks distinct and covering 0..N-1, each thread's own record at its rank,
// and the same member list everywhere.
//
// Output: an nccl-tests style table (median/min/max over runs, goal, status,
// footer OK/FAILED); with --raw, one line per run instead:
//   run N=<n> i=<i> rdzv_ms=<x> release_ms=<x> connect_ms=<x> ok=<0|1> [error=...]
// Exit status: 0 when every check passed and every goal was met, 1
// otherwise, 2 on bad usage.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "rendezvous/agent_driver.hpp"
#include "rendezvous/coordinator.hpp"
#include "rendezvous/rendezvous.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::rendezvous {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct RunResult {
  double rdzv_ms = -1, release_ms = -1, connect_ms = -1;
  bool ok = false;
  std::string error;
};

double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

RunResult RunOnce(int n) {
  RunResult out;
  StoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.log = [](const std::string&) {};
  auto server = StoreServer::Start(so);
  if (!server.ok()) {
    out.error = "store server: " + server.status().message();
    return out;
  }
  const int port = (*server)->port();

  RendezvousSettings settings;
  settings.run_id = "bench";
  settings.min_nodes = n;
  settings.max_nodes = n;
  settings.join_timeout = std::chrono::seconds(120);

  auto coord_client =
      StoreClient::Connect("127.0.0.1", port, settings.read_timeout, "", StoreRole::kAgent);
  if (!coord_client.ok()) {
    out.error = "coordinator client: " + coord_client.status().message();
    return out;
  }
  Coordinator coordinator(std::move(*coord_client), settings, "simhost_coordinator",
                          [](const std::string&) {});
  if (Status s = coordinator.Start(); !s.ok()) {
    out.error = "coordinator: " + s.message();
    return out;
  }

  std::mutex mu;
  std::condition_variable cv;
  int connected = 0;
  bool go = false;
  std::vector<SteadyClock::time_point> start(n), cleared(n);
  std::vector<RoundResult> results(n);
  std::vector<std::string> errors(n);
  std::vector<std::string> agent_ids(n);
  std::vector<std::thread> threads;
  threads.reserve(n);

  const auto t_connect = SteadyClock::now();
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      NodeInfo self;
      self.agent_id = "simhost_" + std::to_string(getpid()) + "_" + std::to_string(i);
      self.name = "simhost";
      self.addr = "127.0.0.1";
      self.nproc = 1;
      self.requested_rank = -1;
      agent_ids[i] = self.agent_id;
      AgentSettings agent;
      agent.rdzv = settings;
      agent.self = self;
      auto rdzv = AgentDriver::Connect("127.0.0.1", port, agent);
      {
        std::unique_lock<std::mutex> lock(mu);
        ++connected;
        cv.notify_all();
        cv.wait(lock, [&] { return go; });
      }
      if (!rdzv.ok()) {
        errors[i] = "connect: " + rdzv.status().message();
        return;
      }
      start[i] = SteadyClock::now();
      auto no_signal = [] { return std::pair<int, std::string>(0, ""); };
      Action action = (*rdzv)->Next(no_signal);
      if (action.kind == ActionKind::kClearWorkerStore) {
        if (Status s = (*rdzv)->ClearWorkerStore(); !s.ok()) {
          errors[i] = s.message();
          return;
        }
        action = (*rdzv)->Next(no_signal);
      }
      cleared[i] = SteadyClock::now();
      if (action.kind != ActionKind::kStartWorkers) {
        errors[i] = "rendezvous: " + action.message;
        return;
      }
      results[i] = action.round;
    });
  }
  SteadyClock::time_point t_go;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return connected == n; });
    t_go = SteadyClock::now();
    go = true;
  }
  cv.notify_all();
  out.connect_ms = Ms(t_go - t_connect);
  for (auto& t : threads) t.join();
  coordinator.Stop();

  for (int i = 0; i < n; ++i) {
    if (!errors[i].empty()) {
      out.error = "thread " + std::to_string(i) + ": " + errors[i];
      return out;
    }
  }
  const auto last_start = *std::max_element(start.begin(), start.end());
  const auto last_cleared = *std::max_element(cleared.begin(), cleared.end());
  out.rdzv_ms = Ms(last_cleared - last_start);
  out.release_ms = Ms(last_cleared - t_go);

  // Correctness.
  std::vector<int> seen(n, 0);
  const std::string members0 = EncodeMembers(results[0].nodes);
  for (int i = 0; i < n; ++i) {
    const RoundResult& r = results[i];
    std::string who = "thread " + std::to_string(i) + ": ";
    if (r.round != 0)
      out.error = who + "round " + std::to_string(r.round) + ", expected 0";
    else if (r.world_size != n)
      out.error = who + "world size " + std::to_string(r.world_size);
    else if (static_cast<int>(r.nodes.size()) != n)
      out.error = who + std::to_string(r.nodes.size()) + " members";
    else if (r.node_rank < 0 || r.node_rank >= n)
      out.error = who + "node rank " + std::to_string(r.node_rank);
    else if (r.nodes[r.node_rank].agent_id != agent_ids[i])
      out.error = who + "own record not at its node rank";
    else if (r.base_rank != r.node_rank)
      out.error = who + "base rank " + std::to_string(r.base_rank);
    else if (EncodeMembers(r.nodes) != members0)
      out.error = who + "member list differs from thread 0's";
    if (!out.error.empty()) return out;
    ++seen[r.node_rank];
  }
  for (int k = 0; k < n; ++k) {
    if (seen[k] != 1) {
      out.error = "node rank " + std::to_string(k) + " given " + std::to_string(seen[k]) + " times";
      return out;
    }
  }
  out.ok = true;
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

int Usage() {
  std::fprintf(stderr, "usage: rendezvous_sim [--runs R] [--raw] N [N ...]\n");
  return 2;
}

}  // namespace
}  // namespace ddprun::rendezvous

int main(int argc, char** argv) {
  using ddprun::rendezvous::Median, ddprun::rendezvous::RunOnce, ddprun::rendezvous::RunResult,
      ddprun::rendezvous::Usage;
  int runs = 3;
  bool raw = false;
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--raw")) {
      raw = true;
    } else if (argv[i][0] != '-' && std::atoi(argv[i]) > 0) {
      sizes.push_back(std::atoi(argv[i]));
    } else {
      return Usage();
    }
  }
  if (sizes.empty() || runs < 1) return Usage();
  // Each simulated agent holds one connection, and the server its peer.
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  bool all_ok = true;
  std::vector<std::string> problems;
  struct Row {
    int n;
    std::vector<double> rdzv, release, connect;
    int ok_runs = 0;
  };
  std::vector<Row> rows;
  for (int n : sizes) {
    Row row{n, {}, {}, {}, 0};
    for (int i = 0; i < runs; ++i) {
      RunResult r = RunOnce(n);
      if (raw) {
        std::printf("run N=%d i=%d rdzv_ms=%.3f release_ms=%.3f connect_ms=%.3f ok=%d%s%s\n", n, i,
                    r.rdzv_ms, r.release_ms, r.connect_ms, r.ok ? 1 : 0,
                    r.ok ? "" : " error=", r.error.c_str());
        std::fflush(stdout);
      }
      if (!r.ok) {
        all_ok = false;
        problems.push_back("N=" + std::to_string(n) + " run " + std::to_string(i) + ": " + r.error);
        continue;
      }
      ++row.ok_runs;
      row.rdzv.push_back(r.rdzv_ms);
      row.release.push_back(r.release_ms);
      row.connect.push_back(r.connect_ms);
    }
    rows.push_back(row);
  }
  if (raw) return all_ok ? 0 : 1;

  struct utsname u;
  uname(&u);
  std::printf("# rendezvous_sim: N agents as threads, real StoreServer + Coordinator, min=max=N\n");
  std::printf("#  host %s, %u CPUs, kernel %s; runs %d per N (median)\n", u.nodename,
              std::thread::hardware_concurrency(), u.release, runs);
  std::printf("#  rdzv = last WaitCleared/MarkCleared return - last NextRound start\n");
  std::printf("#\n#  %-8s %-10s %-5s %12s %12s %12s  %-10s %s\n", "N", "metric", "unit", "median",
              "min", "max", "goal", "status");
  for (const auto& row : rows) {
    auto line = [&](const char* metric, const std::vector<double>& v, double goal_ms) {
      std::string goal = "-", status = "-";
      if (goal_ms > 0) {
        char g[32];
        std::snprintf(g, sizeof g, "< %.0f ms", goal_ms);
        goal = g;
        bool met = !v.empty() && row.ok_runs == runs && Median(v) < goal_ms;
        status = met ? "met" : "MISSED";
        if (!met) all_ok = false;
      }
      if (v.empty()) {
        std::printf("   %-8d %-10s %-5s %12s %12s %12s  %-10s %s\n", row.n, metric, "ms", "n/a",
                    "n/a", "n/a", goal.c_str(), status.c_str());
      } else {
        std::printf("   %-8d %-10s %-5s %12.2f %12.2f %12.2f  %-10s %s\n", row.n, metric, "ms",
                    Median(v), *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()), goal.c_str(), status.c_str());
      }
    };
    double goal = row.n == 1024 ? 5000 : row.n == 16 ? 300 : 0;
    line("rdzv", row.rdzv, goal);
    line("release", row.release, 0);
    line("connect", row.connect, 0);
    std::printf("   %-8d %-10s %-5s %12d %12s %12s  %-10s %s\n", row.n, "correct", "runs",
                row.ok_runs, "-", "-", "all runs", row.ok_runs == runs ? "met" : "MISSED");
  }
  std::printf("#\n");
  for (const auto& p : problems) std::printf("#  WRONG RESULT: %s\n", p.c_str());
  std::printf("#  %s\n", all_ok ? "OK" : "FAILED");
  return all_ok ? 0 : 1;
}
