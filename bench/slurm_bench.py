#!/usr/bin/env python3
"""Side-by-side Slurm benchmark: ddprun vs torchrun under srun on a local Slurm cluster.

Brings up a real Slurm (tests/e2e/slurm_cluster.py: munged, slurmctld and two slurmd on
127.0.0.2 and 127.0.0.3, KillWait 5 s), then, alternating the launchers run by run, starts

    srun -N2 --ntasks-per-node=1 -c 2 bash -c 'exec LAUNCHER --nnodes=2
        --node_rank=$SLURM_NODEID --master_addr=127.0.0.2 --master_port=P
        --nproc_per_node=2 --no_python PYTHON slurm_worker.py sleep DIR'

(static rendezvous, the same flags for both; the worker is the same small stdlib-only
Python program for both, which writes its start time, time.time(), to DIR/running_<rank>
and sleeps), waits until the 4 workers run, then `scancel`s the job. It prints an
nccl-tests style report: a '#' header with the parameters, one row per measurement
(median over --runs runs, ddprun, torchrun, ratio d/t), min/max, and a footer ending in
OK or FAILED (non-zero exit status) when a goal is missed or a run went wrong (a worker
missing, srun's exit code not the launcher's (ddprun 143, torchrun 1: its SignalException),
a process of the job left behind).

Measurements (all CLOCK_REALTIME on this one machine)
  start    srun invoked (just before the spawn) -> the last of the 4 workers running
           (the latest start time the workers wrote).
  cancel   `scancel <job>` invoked -> the last worker process gone (its /proc entry
           gone or a zombie; polled every 2 ms).
  step_end `scancel <job>` invoked -> srun exits (every process of the step is gone,
           the launchers included: their own shutdown counts here).
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "..", "tests", "e2e")
sys.path.insert(0, E2E)
import slurm_cluster  # noqa: E402

WORKER = os.path.join(E2E, "programs", "slurm_worker.py")
NODES, NPROC = 2, 2
WORLD = NODES * NPROC


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step_args(launcher, out, name):
    flags = " ".join(['"--nnodes=%d"' % NODES, '"--node_rank=$SLURM_NODEID"',
                      '"--master_addr=127.0.0.2"', '"--master_port=%d"' % free_port()])
    return ["-N", str(NODES), "--ntasks-per-node=1", "-c", str(NPROC), "--job-name=" + name,
            "bash", "-c", 'exec "$0" %s "$@"' % flags, launcher,
            "--nproc_per_node=%d" % NPROC, "--no_python", sys.executable, WORKER, "sleep", out]


def read_float(path):
    with open(path) as f:
        return float(f.read())


def wait_until(cond, timeout, interval):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    return None


def one_run(cluster, env, launcher, root, who, i, timeout):
    """One srun + scancel; returns (measurements dict, problem or None)."""
    out = tempfile.mkdtemp(prefix="%s_%d_" % (who, i), dir=root)
    name = "bench_%s_%d" % (who, i)
    log = os.path.join(out, "srun.out")
    running = [os.path.join(out, "running_%d" % r) for r in range(WORLD)]
    pid_files = [os.path.join(out, "pid_%d" % r) for r in range(WORLD)]
    t_srun = time.time()
    proc = cluster.srun_background(step_args(launcher, out, name), log, env=env)
    try:
        if not wait_until(lambda: all(os.path.exists(p) for p in pid_files), timeout, 0.01):
            return None, "%s run %d: %d of %d workers started within %g s" % (
                who, i, sum(os.path.exists(p) for p in pid_files), WORLD, timeout)
        started = max(read_float(p) for p in running)
        pids = [int(open(p).read()) for p in pid_files]
        job = cluster.squeue(["-h", "-n", name, "-o", "%i"]).split()[0]
        t_cancel = time.time()
        cluster.scancel([job])
        wait_until(lambda: not any(slurm_cluster.alive(p) for p in pids), timeout, 0.002)
        t_gone = time.time()
        rc = proc.wait(timeout=timeout)
        t_end = time.time()
        left = [p for p in cluster.task_pids()
                if slurm_cluster.environ_of(p).get("SLURM_JOB_ID") == job]
        if any(slurm_cluster.alive(p) for p in pids) or left:
            return None, "%s run %d: processes of job %s left: %s" % (who, i, job, left or pids)
        wait_until(lambda: not cluster.squeue(["-h", "-j", job, "-o", "%i"]).strip(), 20, 0.05)
        m = {"start": (started - t_srun) * 1e3, "cancel": (t_gone - t_cancel) * 1e3,
             "step_end": (t_end - t_cancel) * 1e3}
        # Each launcher ends with 128+SIGTERM; torchrun's SignalException makes it exit 1.
        want = 143 if who == "ddprun" else 1
        if rc != want:
            return m, "%s run %d: srun exit code %d, expected %d\n%s" % (
                who, i, rc, want, open(log).read())
        return m, None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ddprun", default=os.path.join(HERE, "..", "build", "ddprun"))
    ap.add_argument("--torchrun", default=os.path.expanduser("~/.cache/ddprun/venv/bin/torchrun"))
    ap.add_argument("--runs", type=int, default=5, help="runs per launcher (default 5)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds one run may take")
    args = ap.parse_args()
    why = slurm_cluster.missing()
    if why:
        sys.exit(why)
    ddprun_src = os.path.abspath(args.ddprun)
    torchrun = os.path.abspath(args.torchrun)
    benchlib.require_executables((ddprun_src, torchrun))
    t0 = time.time()
    root = tempfile.mkdtemp(prefix="ddprun_slurm_bench_")
    try:
        ddprun = benchlib.snapshot(ddprun_src, root, "ddprun")
        benchlib.print_launcher_header("ddprun vs torchrun under Slurm (srun, scancel)",
                                       ddprun_src, benchlib.ddprun_version(ddprun), torchrun,
                                       benchlib.torch_version(torchrun), benchlib.cpu_model())
        with slurm_cluster.SlurmCluster(nodes=NODES, cpus=4) as cluster:
            print("#  slurm: %s, %d nodes (127.0.0.2-%d) x %d CPUs, KillWait %d s" % (
                cluster.run("srun", ["--version"]).stdout.strip(), NODES, NODES + 1, 4,
                cluster.kill_wait))
            print("#  step: srun -N%d --ntasks-per-node=1 -c %d; each launcher: static rendezvous,"
                  " --nproc_per_node=%d --no_python python slurm_worker.py sleep" % (
                      NODES, NPROC, NPROC))
            print("#  runs: %d per launcher, alternating (median)" % args.runs)
            print("#")
            sys.stdout.flush()
            env = benchlib.launcher_env(keys=(), OMP_NUM_THREADS="1")
            env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
            env["SLURM_CONF"] = cluster.env["SLURM_CONF"]
            res, problems = {}, []
            for i in range(args.runs):
                for who, exe in (("ddprun", ddprun), ("torchrun", torchrun)):
                    m, problem = one_run(cluster, env, exe, root, who, i, args.timeout)
                    if problem:
                        problems.append(problem)
                    for k, v in (m or {}).items():
                        res.setdefault(k, {}).setdefault(who, []).append(v)
        return report(res, problems, t0)
    finally:
        subprocess.run(["rm", "-rf", root])


def report(res, problems, t0):
    rows = [("start", "srun -> all workers running", "d < t", lambda d, t: d < t),
            ("cancel", "scancel -> last worker gone", "-", None),
            ("step_end", "scancel -> srun exits", "d <= t", lambda d, t: d <= t)]
    print("#  %-9s %-29s %-4s %10s %10s %8s  %-7s %s" % (
        "test", "interval", "unit", "ddprun", "torchrun", "d/t", "goal", "status"))
    met = total = 0
    spreads = []
    for key, what, goal, pred in rows:
        dv, tv = res.get(key, {}).get("ddprun"), res.get(key, {}).get("torchrun")
        d, t = benchlib.median_or_none(dv), benchlib.median_or_none(tv)
        status = "-"
        if pred is not None:
            total += 1
            ok = d is not None and t is not None and pred(d, t)
            met += ok
            status = "met" if ok else "MISSED"
        print("   %-9s %-29s %-4s %10s %10s %8s  %-7s %s" % (
            key, what, "ms", "%.1f" % d if d is not None else "n/a",
            "%.1f" % t if t is not None else "n/a",
            "%.3f" % (d / t) if d is not None and t else "-", goal, status))
        for who, v in (("ddprun", dv), ("torchrun", tv)):
            if v:
                spreads.append("#   %-9s %-8s: min %.1f max %.1f" % (key, who, min(v), max(v)))
    print("#")
    print("#  min/max over runs (ms):")
    for s in spreads:
        print(s)
    return benchlib.print_footer(met, total, problems, before=[benchlib.elapsed_line(t0)])


if __name__ == "__main__":
    sys.exit(main())
