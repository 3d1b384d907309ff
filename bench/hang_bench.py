#!/usr/bin/env python3
"""Hang detection benchmark: how fast ddprun notices a hung rank, dumps every
worker and exits, for 2, 4 and 8 ranks; torchrun as the reference.

Prints an nccl-tests style report: a '#' header with the parameters, one row
per measurement (median over --runs runs, with units), a goal and a status per
row, min/max lines, and a footer ending in OK or FAILED.  The exit status is
non-zero on FAILED, i.e. when a goal is missed or a run gave a wrong result.

Workload (per run, fresh --log_dir):
  ddprun --nproc_per_node=N --hang_timeout=T --shutdown_timeout=S --log_dir=DIR \
      build/examples/train --device cpu --width 64 --depth 2 --batch 16 \
      --steps 100000 --hang-at-step 5 --hang-rank 1
  Rank 1 beats (touches DIR/<run>/attempt_0/1/heartbeat) every step and stops
  before the backward of step 5, after printing "rank 1: hanging ..." to
  stderr (unbuffered).  The other ranks then wait in the step's all-reduce.

Time stamps (all CLOCK_REALTIME, i.e. time.time() and file mtimes):
  last_beat  final mtime of rank 1's heartbeat file, read after ddprun exited
             (nothing touches it after the last beat; the workers are dead).
             The arrival time of the "hanging" line is recorded too, as a
             cross-check (hang_msg_lag in the spread lines: line arrival minus
             last_beat; the line is printed after the beat, so it is >= 0).
  hung       arrival of ddprun's first "... hung: no heartbeat ..." error line;
             stdout and stderr of ddprun are pipes read line by line by one
             thread each, every line stamped with time.time() as it arrives
             (ddprun's own log stamps are only HH:MM:SS).
  dumped     arrival of the "debug dump of N workers in ..." info line (ddprun
             logs it after the dump of every worker is written).
  exit       the bench's waitid returning (ddprun exited); includes the
             SIGTERM grace --shutdown_timeout.
Rows: detect = hung - last_beat (goal <= T + 0.5 s), dump = dumped - hung
(goal at N = 8: <= 3 s), total = exit - last_beat, exit_code (goal 124 in
every run).  A run is correct when the exit code is 124, the verdict names
rank 1 ("rank 1 completed #X and has not entered #Y"), and summary.txt plus
rank_R.txt for every rank exist.

torchrun reference: 2 ranks (torchrun --standalone --nproc_per_node=2
--max-restarts=0) of a Gloo script in which rank 1 stamps the time and then
sleeps forever while rank 0 all-reduces once per 0.1 s.  The bench watches
torchrun for --torchrun-window seconds after rank 1's stamp: anything it prints
and whether it exits.  torchrun has no hang detection; the job would end only
at the collective timeout (PyTorch default: 600 s NCCL, 1800 s Gloo), so the
window is not waited out to that point.

Every launcher is started in its own session with a unique tag in its
environment; after every run, whatever still carries the tag is SIGKILLed.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import benchlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "DDPRUN_HANG_BENCH_TAG"

TORCH_SCRIPT = r"""
import os, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1024)
step = 0
while True:
    if rank == 1 and step == 5:
        with open(os.path.join(sys.argv[1], "hang_ts"), "w") as f:
            f.write("%.9f\n" % time.time())
        print("rank 1: hanging at step 5", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    dist.all_reduce(t)
    step += 1
    time.sleep(0.1)
"""


def base_env():
    return benchlib.launcher_env(
        prefixes=("PET_", "TORCHELASTIC_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK",
                  "LOCAL_WORLD_SIZE"),
        OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def run_ddprun(args, n, work):
    log_dir = tempfile.mkdtemp(prefix="hang_n%d_" % n, dir=work)
    argv = [args.ddprun, "--nproc_per_node=%d" % n, "--hang_timeout=%g" % args.timeout,
            "--shutdown_timeout=%g" % args.shutdown_timeout, "--log_dir=%s" % log_dir,
            args.train, "--device", "cpu", "--width", "64", "--depth", "2", "--batch", "16",
            "--steps", "100000", "--hang-at-step", "5", "--hang-rank", "1"]
    c = benchlib.Timed(argv, base_env(), TAG)
    rc, t_exit = c.wait(args.run_timeout)
    res = {"rc": rc, "problems": []}
    t_hang_msg, _ = c.first(r"rank 1: hanging before the backward")
    t_hung, _ = c.first(r"\] rank \d+ .*hung: no heartbeat")
    t_dumped, _ = c.first(r"debug dump of %d workers in " % n)
    beats = glob.glob(os.path.join(log_dir, "*", "attempt_0", "1", "heartbeat"))
    t_beat = os.stat(beats[0]).st_mtime if beats else None
    text = c.text()
    if rc is None:
        res["problems"].append("ddprun did not exit within %g s" % args.run_timeout)
    elif rc != 124:
        res["problems"].append("exit code %s, not 124" % rc)
    for name, v in (("heartbeat file of rank 1", t_beat), ("'hanging' line", t_hang_msg),
                    ("'hung' line", t_hung), ("'debug dump' line", t_dumped)):
        if v is None:
            res["problems"].append("no " + name)
    if not re.search(r"rank 1 completed #\d+ and has not entered #\d+", text):
        res["problems"].append("verdict does not name rank 1 as the straggler")
    dumps = glob.glob(os.path.join(log_dir, "*", "attempt_0", "dumps"))
    if not dumps or not os.path.isfile(os.path.join(dumps[0], "summary.txt")):
        res["problems"].append("no summary.txt")
    else:
        missing = [r for r in range(n)
                   if not os.path.isfile(os.path.join(dumps[0], "rank_%d.txt" % r))]
        if missing:
            res["problems"].append("no dump for ranks %s" % missing)
    if t_beat is not None and t_hung is not None:
        res["detect"] = t_hung - t_beat
    if t_hung is not None and t_dumped is not None:
        res["dump"] = t_dumped - t_hung
    if t_beat is not None and rc is not None:
        res["total"] = t_exit - t_beat
    if t_beat is not None and t_hang_msg is not None:
        res["hang_msg_lag"] = t_hang_msg - t_beat
    res["startup"] = (t_beat - c.t_start) if t_beat is not None else None
    if res["problems"] and args.verbose:
        sys.stderr.write(text + "\n")
    shutil.rmtree(log_dir, ignore_errors=True)
    return res


def run_torchrun(args, work):
    d = tempfile.mkdtemp(prefix="torchrun_", dir=work)
    script = os.path.join(d, "hang_gloo.py")
    with open(script, "w") as f:
        f.write(TORCH_SCRIPT)
    argv = [args.torchrun, "--standalone", "--nproc_per_node=2", "--max-restarts=0", script, d]
    c = benchlib.Timed(argv, base_env(), TAG)
    stamp = os.path.join(d, "hang_ts")
    # Start-up (importing torch on 2 cores) is not part of the window.
    deadline = time.monotonic() + args.run_timeout
    while not os.path.exists(stamp) and time.monotonic() < deadline and c.p.poll() is None:
        time.sleep(0.05)
    t_hang = None
    if os.path.exists(stamp):
        time.sleep(0.05)
        with open(stamp) as f:
            t_hang = float(f.read())
    exited, watched, rc, after = False, None, None, []
    if t_hang is not None:
        exited, watched, rc, after = benchlib.watch_window(c, t_hang, args.torchrun_window)
        after = [text for text in after if "hanging at step 5" not in text]
    else:
        c.wait(0.01)
    shutil.rmtree(d, ignore_errors=True)
    return {"t_hang": t_hang, "watched": watched, "exited": exited, "rc": rc, "said": after,
            "ok": t_hang is not None}


def tool_version(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ddprun", default=os.path.join(REPO, "build", "ddprun"))
    ap.add_argument("--train", default=os.path.join(REPO, "build", "examples", "train"))
    venv_torchrun = os.path.expanduser("~/.cache/ddprun/venv/bin/torchrun")
    ap.add_argument("--torchrun", default=venv_torchrun if os.path.exists(venv_torchrun)
                    else shutil.which("torchrun"))
    ap.add_argument("--nprocs", default="2,4,8")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=2.0, help="--hang_timeout (s)")
    ap.add_argument("--shutdown_timeout", type=float, default=1.0)
    ap.add_argument("--detect-slack", type=float, default=0.5)
    ap.add_argument("--dump-goal", type=float, default=3.0, help="dump time goal at max N (s)")
    ap.add_argument("--run-timeout", type=float, default=120.0)
    ap.add_argument("--torchrun-window", type=float, default=20.0)
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    nprocs = [int(x) for x in args.nprocs.split(",")]
    t0 = time.time()

    work = tempfile.mkdtemp(prefix="hang_bench_")
    # Private copies: a concurrent rebuild cannot change the binaries mid-run.
    for attr in ("ddprun", "train"):
        dst = os.path.join(work, os.path.basename(getattr(args, attr)))
        shutil.copy2(getattr(args, attr), dst)
        setattr(args, attr + "_orig", getattr(args, attr))
        setattr(args, attr, dst)

    load0 = os.getloadavg()[0]
    cpu = benchlib.cpu_model("?")
    print("# Hang detection benchmark: ddprun --hang_timeout vs torchrun")
    print("#  date: %s UTC" % time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0)))
    print(benchlib.host_line(cpu, load0))
    print("#  ddprun: %s (%s), train: %s" % (args.ddprun_orig,
                                              tool_version([args.ddprun, "--version"]),
                                              args.train_orig))
    if not args.no_torchrun and args.torchrun:
        tpy = os.path.join(os.path.dirname(args.torchrun), "python")
        print("#  torchrun: %s (torch %s), reference job: Gloo, 2 ranks, --standalone "
              "--max-restarts=0, rank 1 sleeps forever at step 5, watched %g s after the hang"
              % (args.torchrun, tool_version([tpy, "-c", "import torch; print(torch.__version__)"]),
                 args.torchrun_window))
    print("#  job: --hang_timeout=%g --shutdown_timeout=%g, train --device cpu --width 64 "
          "--depth 2 --batch 16 --steps 100000 --hang-at-step 5 --hang-rank 1"
          % (args.timeout, args.shutdown_timeout))
    print("#  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1; N = %s; median of %d runs"
          % (",".join(map(str, nprocs)), args.runs))
    print("#  detect = 'hung' line - last beat of rank 1 (heartbeat mtime); dump = 'debug dump'"
          " line - 'hung' line; total = ddprun exit - last beat")
    print("#")
    sys.stdout.flush()

    rows, spreads, wrong, goals, met = [], [], [], 0, 0
    for n in nprocs:
        results = []
        for i in range(args.runs):
            r = run_ddprun(args, n, work)
            results.append(r)
            for p in r["problems"]:
                wrong.append("N=%d run %d: %s" % (n, i + 1, p))

        def vals(key):
            return [r[key] for r in results if r.get(key) is not None]

        def add(metric, unit, key, goal, check, fmt="%.3f"):
            nonlocal goals, met
            v = vals(key)
            med = benchlib.median_or_none(v)
            status = "-"
            if check is not None:
                goals += 1
                ok = med is not None and len(v) == args.runs and check(med)
                met += ok
                status = "met" if ok else "MISSED"
            rows.append((n, metric, unit, fmt % med if med is not None else "-", goal, status))
            if v:
                spreads.append("  N=%d %-13s min %s max %s  (runs: %s)" % (
                    n, metric, fmt % min(v), fmt % max(v), " ".join(fmt % x for x in v)))

        lim = args.timeout + args.detect_slack
        add("detect", "s", "detect", "<= %.2f s" % lim, lambda m: m <= lim)
        if n == max(nprocs):
            add("dump", "s", "dump", "<= %.1f s" % args.dump_goal,
                lambda m: m <= args.dump_goal)
        else:
            add("dump", "s", "dump", "report", None)
        add("total", "s", "total", "report", None)
        codes = [r["rc"] for r in results]
        goals += 1
        ok = all(c == 124 for c in codes)
        met += ok
        rows.append((n, "exit_code", "-", ",".join(str(c) for c in codes), "124 all runs",
                     "met" if ok else "MISSED"))
        add("hang_msg_lag", "s", "hang_msg_lag", "info", None)
        add("startup", "s", "startup", "info", None)

    tr = None
    if not args.no_torchrun:
        if args.torchrun and os.path.exists(args.torchrun):
            tr = run_torchrun(args, work)
        else:
            wrong.append("torchrun not found")
    shutil.rmtree(work, ignore_errors=True)

    print("#  %5s %-13s %-5s %14s  %-14s %s" % ("N", "metric", "unit", "ddprun", "goal", "status"))
    for n, metric, unit, v, goal, status in rows:
        if metric in ("hang_msg_lag", "startup"):
            continue
        print("   %5d %-13s %-5s %14s  %-14s %s" % (n, metric, unit, v, goal, status))
    if tr is not None:
        if not tr["ok"]:
            print("   %5d %-13s %-5s %14s  %-14s %s" % (2, "torchrun", "s", "-", "reference",
                                                        "did not reach the hang"))
        elif tr["exited"]:
            print("   %5d %-13s %-5s %14s  %-14s exited (rc %s) %.1f s after the hang" % (
                2, "torchrun", "s", "%.1f" % tr["watched"], "reference", tr["rc"],
                tr["watched"]))
        else:
            print("   %5d %-13s %-5s %14s  %-14s did not notice within %.0f s (%d lines after "
                  "the hang)" % (2, "torchrun", "s", "> %.0f" % tr["watched"], "reference",
                                 args.torchrun_window, len(tr["said"])))
    print("#  torchrun: no hang detection; waits until the NCCL/Gloo collective timeout "
          "(PyTorch default 600 s for NCCL, 1800 s for Gloo)")
    if tr is not None and tr["ok"]:
        print("#   measured: Gloo, 2 ranks, rank 1 sleeps forever at step 5, --max-restarts=0; "
              "watched %.1f s after the hang: %s" % (
                  tr["watched"], "exited" if tr["exited"] else "still running, killed by the bench"))
        for line in tr["said"][:5]:
            print("#   torchrun said: %s" % line[:150])
    print("#")
    print("#  min/max over runs (hang_msg_lag: 'hanging' line arrival - heartbeat mtime; "
          "startup: last beat of rank 1 - ddprun start):")
    for s in spreads:
        print("# " + s)
    return benchlib.print_footer(met, goals, wrong, before=[benchlib.elapsed_line(t0, load=True)],
                                 label="WRONG")


if __name__ == "__main__":
    sys.exit(main())
