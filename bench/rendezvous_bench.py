#!/usr/bin/env python3
"""Rendezvous time benchmark: ddprun vs torchrun (c10d), agents as processes,
plus ddprun's rendezvous simulated at large N (bench/rendezvous_sim.cpp).

Prints an nccl-tests style report: a '#' header with the parameters, one row
per measurement (median over --runs runs, with units and the ddprun/torchrun
ratio where both ran), the goal and its status, and a footer ending in OK or
FAILED.  The exit status is non-zero on FAILED, i.e. when a goal is missed or
any run gave a wrong result.

Processes (N = 4 and 16 for both launchers; N = 128 for ddprun alone)
  N agents, all on this host, each started with posix_spawn in its own session:
    ddprun   --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:P --rdzv_id=bench
             --nnodes=N:N --nproc_per_node=1 --rdzv_conf=join_timeout=120
             --local_addr=127.0.0.1 --log_dir <own dir> --no_python WORKER DIR
    torchrun the same with --rdzv-backend etc. (torch 2.x spelling)
  P is a free port picked per run; the agent that binds it hosts the store
  (both launchers: the others fail to bind and join as clients).  min = max =
  N, so no last-call wait.  WORKER is a tiny C program compiled here: first
  thing in main() it takes CLOCK_REALTIME and writes it, with RANK and
  WORLD_SIZE, to DIR/start_<RANK>, then exits 0.
    rdzv  = latest worker start stamp - time.time() right after the
            posix_spawn of the last agent returned
    spawn = last agent spawned - first agent spawned (information: how long
            this script took to start the N agents)
  Checks: every agent exits 0; N stamps; RANK values exactly 0..N-1; every
  WORLD_SIZE == N.  After every run, every process carrying the run's tag in
  its environment is SIGKILLed.

Simulation (N = 128 and 1024, ddprun alone)
  build/bench/rendezvous_sim --raw: N threads against a real StoreServer and
  a real Coordinator in one process (see its header): rdzv = last thread's
  WaitCleared (MarkCleared for node rank 0) return - last thread's NextRound
  start.  No process start, no worker spawn.

Goals (issue): N=16 under 0.3 s, N=1024 under 5 s, on 2 cores.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import benchlib

WORKER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
  struct timespec t; clock_gettime(CLOCK_REALTIME, &t);
  if (argc < 2) return 2;
  const char *rank = getenv("RANK"), *ws = getenv("WORLD_SIZE");
  char p[4096]; snprintf(p, sizeof p, "%s/start_%s", argv[1], rank ? rank : "x");
  FILE *f = fopen(p, "w"); if (!f) return 3;
  fprintf(f, "%ld.%09ld %s %s\n", (long)t.tv_sec, t.tv_nsec, rank ? rank : "-1", ws ? ws : "-1");
  fclose(f);
  return 0;
}
"""

TAG = "DDPRUN_RDZV_BENCH_TAG"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_processes(who, exe, worker, n, root, base_env, timeout):
    """One run of N agents. Returns (rdzv_s, spawn_s, problem or None)."""
    d = os.path.join(root, "run")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "stamps"))
    stamps = os.path.join(d, "stamps")
    port = free_port()
    env, tagval = benchlib.tagged_env(base_env, TAG)
    if who == "ddprun":
        flags = ["--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:%d" % port, "--rdzv_id=bench",
                 "--nnodes=%d:%d" % (n, n), "--nproc_per_node=1", "--rdzv_conf=join_timeout=120",
                 "--local_addr=127.0.0.1"]
        logflag, noprog = "--log_dir", "--no_python"
    else:
        flags = ["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:%d" % port, "--rdzv-id=bench",
                 "--nnodes=%d:%d" % (n, n), "--nproc-per-node=1", "--rdzv-conf=join_timeout=120",
                 "--local-addr=127.0.0.1"]
        logflag, noprog = "--log-dir", "--no-python"
    null_fd = os.open(os.devnull, os.O_RDONLY)
    pids = []
    logs = []
    try:
        t_first = None
        for i in range(n):
            logd = os.path.join(d, "logs%d" % i)
            os.makedirs(logd)
            argv = [exe] + flags + [logflag, logd, noprog, worker, stamps]
            lp = os.path.join(d, "agent%d.log" % i)
            logs.append(lp)
            out_fd = os.open(lp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                fa = [(os.POSIX_SPAWN_DUP2, null_fd, 0), (os.POSIX_SPAWN_DUP2, out_fd, 1),
                      (os.POSIX_SPAWN_DUP2, out_fd, 2)]
                if t_first is None:
                    t_first = time.time()
                pids.append(os.posix_spawn(exe, argv, env, file_actions=fa, setsid=True))
            finally:
                os.close(out_fd)
        t_last = time.time()
        rcs = {}
        deadline = time.monotonic() + timeout
        while len(rcs) < n and time.monotonic() < deadline:
            progressed = False
            for pid in pids:
                if pid in rcs:
                    continue
                r, status = os.waitpid(pid, os.WNOHANG)
                if r == pid:
                    rcs[pid] = os.waitstatus_to_exitcode(status)
                    progressed = True
            if not progressed:
                time.sleep(0.02)
    finally:
        os.close(null_fd)
        benchlib.kill_tagged(TAG, tagval, pids, tries=100)
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    problem = None
    if len(rcs) < n:
        problem = "%d of %d agents still running after %d s" % (n - len(rcs), n, timeout)
    else:
        bad = [(i, rcs[p]) for i, p in enumerate(pids) if rcs[p] != 0]
        if bad:
            i, rc = bad[0]
            tail = ""
            try:
                with open(logs[i], errors="replace") as f:
                    tail = f.read()[-300:].replace("\n", " | ")
            except OSError:
                pass
            problem = "%d agent(s) exited non-zero (agent %d: %d; log: %s)" % (len(bad), i, rc, tail)
    times, ranks = [], []
    for name in os.listdir(stamps):
        with open(os.path.join(stamps, name)) as f:
            t, rank, ws = f.read().split()
        times.append(float(t))
        ranks.append(int(rank))
        if int(ws) != n and problem is None:
            problem = "worker rank %s saw WORLD_SIZE=%s, expected %d" % (rank, ws, n)
    if sorted(ranks) != list(range(n)) and problem is None:
        problem = "worker ranks %s, expected 0..%d" % (sorted(ranks)[:20], n - 1)
    rdzv = (max(times) - t_last) if times and problem is None else None
    return rdzv, t_last - t_first, problem


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--ddprun", default=os.path.join(here, "..", "build", "ddprun"))
    ap.add_argument("--sim", default=os.path.join(here, "..", "build", "bench", "rendezvous_sim"))
    ap.add_argument("--torchrun", default=os.path.expanduser("~/.cache/ddprun/venv/bin/torchrun"))
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (default 3, --quick 1)")
    ap.add_argument("--quick", action="store_true", help="1 run per measurement")
    ap.add_argument("--both", default="4,16", help="agent counts for both launchers (processes)")
    ap.add_argument("--ddprun-only", default="128", help="agent counts for ddprun alone (processes)")
    ap.add_argument("--sim-sizes", default="128,1024", help="agent counts for the simulation")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run before it is killed")
    args = ap.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    both = [int(x) for x in args.both.split(",") if x]
    donly = [int(x) for x in args.ddprun_only.split(",") if x]
    sim_sizes = [int(x) for x in args.sim_sizes.split(",") if x]

    ddprun_src, sim_src, torchrun = (os.path.abspath(p) for p in (args.ddprun, args.sim, args.torchrun))
    benchlib.require_executables((ddprun_src, sim_src, torchrun))
    cc = benchlib.find_cc()
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass

    t_begin = time.time()
    root = tempfile.mkdtemp(prefix="ddprun_rdzv_bench_")
    try:
        # Snapshots, so a concurrent rebuild cannot change the binaries mid-run.
        ddprun = benchlib.snapshot(ddprun_src, root, "ddprun")
        sim = benchlib.snapshot(sim_src, root, "rendezvous_sim")
        worker = benchlib.compile_worker(cc, WORKER_C, root)

        ddprun_ver = benchlib.ddprun_version(ddprun)
        torch_ver = benchlib.torch_version(torchrun)
        model = benchlib.cpu_model()
        base_env = benchlib.launcher_env(
            keys=("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
            OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")

        benchlib.print_launcher_header("ddprun vs torchrun rendezvous time benchmark", ddprun_src,
                                       ddprun_ver, torchrun, torch_ver, model)
        print("#  processes: N agents x 1 worker (compiled C), c10d on 127.0.0.1, --nnodes=N:N, "
              "join_timeout=120; both: N=%s; ddprun only: N=%s" % (
                  ",".join(map(str, both)), ",".join(map(str, donly))))
        print("#  rdzv = latest worker start (CLOCK_REALTIME) - last agent posix_spawn returned")
        print("#  simulation: %s N=%s (threads vs real StoreServer + Coordinator; no process/worker start)"
              % (os.path.basename(sim), ",".join(map(str, sim_sizes))))
        print("#  runs: %d per measurement (median)" % runs)
        sys.stdout.flush()

        res = {}  # (kind, n, metric) -> {who: [values]}
        problems = []

        def add(kind, n, metric, who, v):
            res.setdefault((kind, n, metric), {}).setdefault(who, []).append(v)

        plan = [(n, who, exe) for n in both for who, exe in (("ddprun", ddprun), ("torchrun", torchrun))]
        plan += [(n, "ddprun", ddprun) for n in donly]
        for n, who, exe in plan:
            for i in range(runs):
                rdzv, spawn, problem = run_processes(who, exe, worker, n, root, base_env, args.timeout)
                if problem:
                    problems.append("%s processes N=%d run %d: %s" % (who, n, i, problem))
                else:
                    add("proc", n, "rdzv", who, rdzv * 1e3)
                add("proc", n, "spawn", who, spawn * 1e3)
                add("proc", n, "correct_runs", who, 0 if problem else 1)

        sim_out = subprocess.run([sim, "--raw", "--runs", str(runs)] + [str(n) for n in sim_sizes],
                                 capture_output=True, text=True, timeout=args.timeout * runs * len(sim_sizes))
        seen = set()
        for line in sim_out.stdout.splitlines():
            if not line.startswith("run "):
                continue
            f = dict(kv.split("=", 1) for kv in line.split()[1:7])
            n = int(f["N"])
            seen.add(n)
            if f.get("ok") != "1":
                problems.append("simulation N=%d run %s: %s" % (n, f["i"], line.split(" error=", 1)[-1]))
                add("sim", n, "correct_runs", "ddprun", 0)
                continue
            add("sim", n, "rdzv", "ddprun", float(f["rdzv_ms"]))
            add("sim", n, "release", "ddprun", float(f["release_ms"]))
            add("sim", n, "connect", "ddprun", float(f["connect_ms"]))
            add("sim", n, "correct_runs", "ddprun", 1)
        for n in sim_sizes:
            if n not in seen:
                problems.append("simulation N=%d: no result (exit %d: %s)" % (
                    n, sim_out.returncode, sim_out.stderr.strip()[-200:]))

        def goal_for(n):
            if n == 16:
                return "d < 300 ms", lambda d: d < 300
            if n == 1024:
                return "d < 5000 ms", lambda d: d < 5000
            return "-", None

        rows = []
        for n in both:
            rows += [("proc", n, "rdzv", "ms", "%.1f") + goal_for(n),
                     ("proc", n, "spawn", "ms", "%.1f", "-", None),
                     ("proc", n, "correct_runs", "runs", "%.0f", "all runs", None)]
        for n in donly:
            rows += [("proc", n, "rdzv", "ms", "%.1f") + goal_for(n),
                     ("proc", n, "spawn", "ms", "%.1f", "-", None),
                     ("proc", n, "correct_runs", "runs", "%.0f", "all runs", None)]
        for n in sim_sizes:
            rows += [("sim", n, "rdzv", "ms", "%.1f") + goal_for(n),
                     ("sim", n, "release", "ms", "%.1f", "-", None),
                     ("sim", n, "connect", "ms", "%.1f", "-", None),
                     ("sim", n, "correct_runs", "runs", "%.0f", "all runs", None)]

        print("#")
        print("#  %-5s %5s %-13s %-5s %12s %12s %10s  %-12s %s" % (
            "kind", "N", "metric", "unit", "ddprun", "torchrun", "d/t", "goal", "status"))
        goals_total = goals_met = 0
        spreads = []
        for kind, n, metric, unit, fmt, goal, pred in rows:
            vals = res.get((kind, n, metric), {})
            dv, tv = vals.get("ddprun"), vals.get("torchrun")
            has_t = kind == "proc" and n in both
            if metric == "correct_runs":
                d = sum(dv) if dv else 0
                t = (sum(tv) if tv else 0) if has_t else None
                ok = d == runs and (t is None or t == runs)
                goals_total += 1
                goals_met += ok
                status = "met" if ok else "MISSED"
            else:
                d = benchlib.median_or_none(dv)
                t = benchlib.median_or_none(tv)
                status = "-"
                if pred is not None:
                    goals_total += 1
                    ok = d is not None and len(dv) == runs and pred(d)
                    goals_met += ok
                    status = "met" if ok else "MISSED"
            ds = (fmt % d) if d is not None else "n/a"
            ts = (fmt % t) if t is not None else ("n/a" if has_t else "-")
            ratio = ("%.4f" % (d / t)) if (d is not None and t and metric != "correct_runs") else "-"
            print("   %-5s %5d %-13s %-5s %12s %12s %10s  %-12s %s" % (
                kind, n, metric, unit, ds, ts, ratio, goal, status))
            if metric != "correct_runs" and runs > 1:
                for who, v in (("ddprun", dv), ("torchrun", tv)):
                    if v:
                        spreads.append("#   %-5s %5d %-8s %-8s: min %s max %s" % (
                            kind, n, metric, who, fmt % min(v), fmt % max(v)))
        print("#")
        if spreads:
            print("#  min/max over runs:")
            for s in spreads:
                print(s)
        return benchlib.print_footer(goals_met, goals_total, problems,
                                     before=[benchlib.elapsed_line(t_begin)])
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
