#!/usr/bin/env python3
"""PyTorch hang benchmark: how fast ddprun --hang_detect=torch names the rank of an unmodified
PyTorch DDP job that stopped calling all_reduce; torchrun on the same job as the reference.

Prints an nccl-tests style report: a '#' header with the parameters, one row per measurement
(median over --runs runs), a goal and a status per row, min/max lines, and a footer ending in OK
or FAILED.  The exit status is non-zero on FAILED: a goal missed or a run with a wrong result.

Workload (per run, fresh --log_dir; Gloo on CPU, 2 ranks):
  ddprun --nproc_per_node=2 --hang_detect=torch --hang_timeout=T --shutdown_timeout=S \
      --log_dir=DIR tests/e2e/pytorch_hang_job.py --hang-step 20 --step-sleep 0.02
  A torch.nn.Linear under DistributedDataParallel; after step 20's optimizer step rank 1 prints
  "rank 1 stops before all_reduce at step 20" (flushed) and sleeps forever instead of the step's
  dist.all_reduce, in which rank 0 then waits.  Nothing in the script knows about ddprun.

Time stamps (time.time() of each line's arrival on the bench's pipes, one reader per stream):
  stop    the worker's "rank 1 stops before all_reduce" line
  named   ddprun's "hang, by PyTorch's collectives: rank 1 did not enter ..." error line (logged
          the moment the hang is found, before any dump)
  report  ddprun's "debug dump of 2 workers" line: every rank's native and Python stacks, the
          flight recorders dumped and PyTorch's fr_trace run on them, all written and printed
  exit    ddprun's exit (includes the SIGTERM grace --shutdown_timeout)
Rows: named = named - stop (goal <= T + 2 s), report = report - stop, total = exit - stop,
exit_code (124 in every run).  A run is right when it exits 124, the summary says "rank 1 did
not enter", fr_trace's verdict says "missing ranks: {1}", and rank 1's Python stack (py-spy)
shows the function it sleeps in.

torchrun reference: the same script, `torchrun --standalone --nproc_per_node=2
--max-restarts=0`, watched for --torchrun-window seconds after the stop line: whether it exits and
what it prints.  torchrun has no hang detection: the job ends at PyTorch's collective timeout
(default 1800 s for Gloo, 600 s for NCCL), so the window is not waited out to that point.
"""

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time

import benchlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "DDPRUN_PYTORCH_HANG_BENCH_TAG"
JOB = os.path.join(REPO, "tests", "e2e", "pytorch_hang_job.py")
JOB_ARGS = ["--hang-step", "20", "--step-sleep", "0.02"]
STOP = r"rank 1 stops before all_reduce"


def base_env(python):
    env = benchlib.launcher_env(
        prefixes=("PET_", "TORCHELASTIC_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK",
                  "LOCAL_WORLD_SIZE"),
        OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHON_EXEC=python)
    # py-spy (the Python stacks) lives next to the venv's python.
    env["PATH"] = os.path.dirname(python) + ":" + env.get("PATH", "/usr/bin:/bin")
    return env


def run_ddprun(args, work):
    log_dir = tempfile.mkdtemp(prefix="pyhang_", dir=work)
    argv = [args.ddprun, "--nproc_per_node=2", "--hang_detect=torch",
            "--hang_timeout=%g" % args.timeout, "--shutdown_timeout=%g" % args.shutdown_timeout,
            "--log_dir=%s" % log_dir, JOB] + JOB_ARGS
    c = benchlib.Timed(argv, base_env(args.python), TAG)
    rc, t_exit = c.wait(args.run_timeout)
    t_stop, _ = c.first(STOP)
    t_named, _ = c.first(r"hang, by PyTorch's collectives: rank 1 did not enter")
    t_report, _ = c.first(r"debug dump of 2 workers in ")
    text = c.text()
    res = {"rc": rc, "problems": []}
    if rc is None:
        res["problems"].append("ddprun did not exit within %g s" % args.run_timeout)
    elif rc != 124:
        res["problems"].append("exit code %s, not 124" % rc)
    for name, v in (("stop line", t_stop), ("'hang, by PyTorch's collectives' line naming "
                                            "rank 1", t_named), ("'debug dump' line", t_report)):
        if v is None:
            res["problems"].append("no " + name)
    if "missing ranks: {1}" not in text:
        res["problems"].append("fr_trace did not say 'missing ranks: {1}'")
    summaries = glob.glob(os.path.join(log_dir, "*", "attempt_0", "dumps", "summary.txt"))
    summary = open(summaries[0]).read() if summaries else ""
    if "stuck_before_all_reduce" not in summary:
        res["problems"].append("no Python stack of rank 1 in summary.txt")
    if t_stop is not None:
        for key, t in (("named", t_named), ("report", t_report), ("total", t_exit)):
            if t is not None and (key != "total" or rc is not None):
                res[key] = t - t_stop
        res["startup"] = t_stop - c.t_start
    if res["problems"] and args.verbose:
        sys.stderr.write(text + "\n")
    shutil.rmtree(log_dir, ignore_errors=True)
    return res


def run_torchrun(args):
    argv = [args.torchrun, "--standalone", "--nproc_per_node=2", "--max-restarts=0", JOB] + JOB_ARGS
    c = benchlib.Timed(argv, base_env(args.python), TAG)
    deadline = time.monotonic() + args.run_timeout
    t_stop = None
    while t_stop is None and time.monotonic() < deadline and c.p.poll() is None:
        time.sleep(0.05)
        t_stop, _ = c.first(STOP)
    if t_stop is None:
        c.wait(0.01)
        return {"ok": False}
    exited, watched, rc, after = benchlib.watch_window(c, t_stop, args.torchrun_window)
    return {"ok": True, "watched": watched, "exited": exited, "rc": rc, "said": after}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    benchlib.add_launcher_args(ap, REPO)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=3.0, help="--hang_timeout (s)")
    ap.add_argument("--shutdown_timeout", type=float, default=2.0)
    ap.add_argument("--slack", type=float, default=2.0, help="goal: named <= timeout + slack")
    ap.add_argument("--run-timeout", type=float, default=120.0)
    ap.add_argument("--torchrun-window", type=float, default=60.0)
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    benchlib.require_executables([args.ddprun, args.python])
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="pytorch_hang_bench_")
    ddprun_orig = args.ddprun
    args.ddprun = shutil.copy2(args.ddprun, os.path.join(work, "ddprun"))  # immune to rebuilds

    print("# PyTorch hang benchmark: ddprun --hang_detect=torch vs torchrun, unmodified DDP job")
    print(benchlib.date_line())
    print(benchlib.host_line(benchlib.cpu_model("?"), os.getloadavg()[0]))
    print("#  ddprun: %s (%s); python: %s (torch %s)" % (
        ddprun_orig, benchlib.ddprun_version(args.ddprun), args.python,
        benchlib.torch_version(args.torchrun)))
    print("#  job: 2 ranks, Gloo, %s %s; --hang_timeout=%g --shutdown_timeout=%g; median of %d runs"
          % (os.path.relpath(JOB, REPO), " ".join(JOB_ARGS), args.timeout, args.shutdown_timeout,
             args.runs))
    print("#  named = ddprun's line naming rank 1 - rank 1's stop line; report = 'debug dump' "
          "line (stacks, flight recorders, fr_trace) - stop; total = exit - stop")
    print("#")
    sys.stdout.flush()

    results, wrong = [], []
    for i in range(args.runs):
        r = run_ddprun(args, work)
        results.append(r)
        wrong += ["run %d: %s" % (i + 1, p) for p in r["problems"]]
    tr = None
    if not args.no_torchrun:
        if os.path.exists(args.torchrun):
            tr = run_torchrun(args)
        else:
            wrong.append("torchrun not found at %s" % args.torchrun)
    shutil.rmtree(work, ignore_errors=True)

    goals, met, spreads = 0, 0, []
    print("#  %-10s %-5s %12s  %-16s %s" % ("metric", "unit", "ddprun", "goal", "status"))

    def row(metric, goal, check):
        nonlocal goals, met
        v = [r[metric] for r in results if r.get(metric) is not None]
        med = benchlib.median_or_none(v)
        status = "-"
        if check is not None:
            goals += 1
            ok = med is not None and len(v) == args.runs and check(med)
            met += ok
            status = "met" if ok else "MISSED"
        print("   %-10s %-5s %12s  %-16s %s" % (metric, "s", "%.2f" % med if med is not None
                                                 else "-", goal, status))
        if v:
            spreads.append("#   %-8s min %.2f max %.2f (runs: %s)" % (
                metric, min(v), max(v), " ".join("%.2f" % x for x in v)))

    limit = args.timeout + args.slack
    row("named", "<= %.1f s" % limit, lambda m: m <= limit)
    row("report", "report", None)
    row("total", "report", None)
    codes = [r["rc"] for r in results]
    goals += 1
    ok = all(c == 124 for c in codes)
    met += ok
    print("   %-10s %-5s %12s  %-16s %s" % ("exit_code", "-", ",".join(map(str, codes)),
                                           "124 all runs", "met" if ok else "MISSED"))
    if tr is not None:
        if not tr["ok"]:
            print("   %-10s %-5s %12s  %-16s %s" % ("torchrun", "s", "-", "reference",
                                                   "did not reach the hang"))
        elif tr["exited"]:
            print("   %-10s %-5s %12s  %-16s exited (rc %s)" % (
                "torchrun", "s", "%.1f" % tr["watched"], "reference", tr["rc"]))
        else:
            print("   %-10s %-5s %12s  %-16s not noticed in %.0f s; %d lines printed after the "
                  "stop" % ("torchrun", "s", "> %.0f" % tr["watched"], "reference",
                            args.torchrun_window, len(tr["said"])))
        for line in tr["said"][:5]:
            print("#   torchrun said: %s" % line[:150])
    print("#  torchrun has no hang detection: the job waits for PyTorch's collective timeout "
          "(default 1800 s Gloo, 600 s NCCL), then reports the timeout, not the rank")
    print("#  min/max over runs (startup: ddprun start to rank 1's stop line):")
    for s in spreads:
        print(s)
    startups = [r["startup"] for r in results if r.get("startup") is not None]
    if startups:
        print("#   startup  median %.2f" % benchlib.median_or_none(startups))
    return benchlib.print_footer(met, goals, wrong, before=[benchlib.elapsed_line(t0, load=True)],
                                 label="WRONG")


if __name__ == "__main__":
    sys.exit(main())
