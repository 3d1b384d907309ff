#!/usr/bin/env python3
"""Side-by-side launcher benchmark: ddprun vs torchrun.

Runs both launchers in the same invocation on the same workloads and prints an
nccl-tests style report: a '#' header with the parameters, one row per
measurement (median over --runs runs, with units and the ddprun/torchrun
ratio), and a footer ending in OK or FAILED.  The exit status is non-zero on
FAILED, i.e. when a ddprun goal is missed or any run gave a wrong result.

Measurements
  launch   N workers running /bin/true: launcher wall time; launcher peak RSS
           (VmHWM of the launcher process only, polled from /proc every
           --poll-ms; separate runs from the timed ones so polling cannot
           perturb the wall time).  wait4's ru_maxrss is not used: it is the
           max over the launcher and its reaped workers, and with a vfork-style
           spawn the kernel also charges the spawner's (this script's) RSS at
           exec time.
  failure  4 workers; local rank 0 exits with code 3 after 1 s, the others
           sleep 30 s.  Latency = launcher exit (bench's waitid returns) minus
           the CLOCK_REALTIME stamp the failing worker took right before _exit.
  restart  --max_restarts=1; rank 0 fails on attempt 0 as above; on attempt 1
           every worker stamps CLOCK_REALTIME first thing in main().
           Latency = earliest attempt-1 start stamp minus the failure stamp.
  tee      2 workers each print L lines under --tee 3, launcher stdout to a
           file: wall time, lines/s, launcher CPU (utime+stime of the launcher
           process itself, read from /proc/<pid>/stat while it is a zombie,
           i.e. after exit and before the bench reaps it; this excludes the
           workers, whose time is in cutime/cstime; resolution 1 clock tick,
           10 ms).  The output file is
           checked: exactly 2*L lines, each '[default<r>]:w<r> <i> <payload>'
           whole, and every rank's i running 0..L-1 in order.

Workers are a tiny C program compiled here with cc (no Python start-up cost).
Every launcher is started in its own session with a unique tag in its
environment; after every run, whatever still carries the tag is SIGKILLed.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
import time

import benchlib

WORKER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static void stamp(const char *dir, const char *name, double t) {
  char p[4096]; snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w"); if (f) { fprintf(f, "%.9f\n", t); fclose(f); }
}
static int envint(const char *k) { const char *v = getenv(k); return v ? atoi(v) : 0; }
int main(int argc, char **argv) {
  double t0 = now();
  if (argc < 3) return 2;
  const char *mode = argv[1], *dir = argv[2];
  int rank = envint("LOCAL_RANK"), attempt = envint("TORCHELASTIC_RESTART_COUNT");
  if (!strcmp(mode, "fail") || !strcmp(mode, "restart")) {
    double delay = atof(argv[3]); int code = atoi(argv[4]);
    if (!strcmp(mode, "restart")) {
      char n[64]; snprintf(n, sizeof n, "start_%d_%d", attempt, rank); stamp(dir, n, t0);
      if (attempt > 0) return 0;
    }
    if (rank == 0) {
      usleep((useconds_t)(delay * 1e6));
      double t = now(); stamp(dir, "fail_ts", t); _exit(code);
    }
    sleep(30); return 0;
  }
  if (!strcmp(mode, "print")) {
    long n = atol(argv[3]);
    for (long i = 0; i < n; i++)
      printf("w%d %ld abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ\n", rank, i);
    return 0;
  }
  return 2;
}
"""

PAYLOAD = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Runner:
    def __init__(self, workdir):
        self.workdir = workdir
        self.tag = "DDPRUN_BENCH_TAG"
        self.base_env = benchlib.launcher_env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")

    def run(self, argv, stdout_path=os.devnull, poll_ms=None):
        """Spawn argv in a new session; return a dict with rc, wall_s, end_time,
        hwm_kb (polled VmHWM, or None), cpu_s (own utime+stime)."""
        env, tagval = benchlib.tagged_env(self.base_env, self.tag)
        out_fd = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err_fd = os.open(os.path.join(self.workdir, "launcher_stderr.log"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        fa = [(os.POSIX_SPAWN_DUP2, null_fd, 0), (os.POSIX_SPAWN_DUP2, out_fd, 1),
              (os.POSIX_SPAWN_DUP2, err_fd, 2)]
        hwm = None
        try:
            t0 = time.perf_counter()
            pid = os.posix_spawn(argv[0], argv, env, file_actions=fa, setsid=True)
        finally:
            os.close(out_fd); os.close(err_fd); os.close(null_fd)
        try:
            if poll_ms is None:
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            else:
                status_path = "/proc/%d/status" % pid
                while True:
                    r = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                    if r is not None:
                        break
                    try:
                        with open(status_path) as f:
                            for line in f:
                                if line.startswith("VmHWM:"):
                                    v = int(line.split()[1])
                                    hwm = v if hwm is None else max(hwm, v)
                                    break
                    except OSError:
                        pass
                    time.sleep(poll_ms / 1000.0)
            t1 = time.perf_counter()
            end_time = time.time()
            cpu = None
            try:  # zombie: own utime/stime still readable, workers are in cutime/cstime
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
            except (OSError, IndexError, ValueError):
                pass
            _, status, ru = os.wait4(pid, 0)
        finally:
            self.cleanup(pid, tagval)
        return {"rc": os.waitstatus_to_exitcode(status), "wall_s": t1 - t0, "end_time": end_time,
                "hwm_kb": hwm, "cpu_s": cpu}

    def cleanup(self, pid, tagval):
        benchlib.kill_tagged(self.tag, tagval, [pid])


def read_ts(path):
    with open(path) as f:
        return float(f.read().strip())


def fresh_dir(root, name):
    d = os.path.join(root, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def check_tee_output(path, nlines):
    """Return None if correct, else a short description of the first problem."""
    pat = re.compile(r"^\[default(\d+)\]:w(\d+) (\d+) " + PAYLOAD + r"$")
    nxt = {0: 0, 1: 0}
    total = 0
    with open(path, "r", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = pat.match(line)
            if not m:
                return "malformed line %d: %r" % (total + 1, line[:120])
            r, r2, i = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if r != r2 or r not in nxt:
                return "prefix rank %d != content rank %d" % (r, r2)
            if i != nxt[r]:
                return "rank %d: expected line %d, got %d" % (r, nxt[r], i)
            nxt[r] += 1
            total += 1
    if total != 2 * nlines:
        return "%d lines, expected %d" % (total, 2 * nlines)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--ddprun", default=os.path.join(here, "..", "build", "ddprun"))
    ap.add_argument("--torchrun", default=os.path.expanduser("~/.cache/ddprun/venv/bin/torchrun"))
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (default 5, --quick 3)")
    ap.add_argument("--quick", action="store_true", help="3 runs and smaller sizes")
    ap.add_argument("--poll-ms", type=float, default=1.0, help="VmHWM poll interval (ms)")
    args = ap.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    nproc_launch = 8
    nproc_fail = 4
    fail_delay = 1.0
    tee_lines = 20000 if args.quick else 200000

    ddprun_src = os.path.abspath(args.ddprun)
    torchrun = os.path.abspath(args.torchrun)
    benchlib.require_executables((ddprun_src, torchrun))
    cc = benchlib.find_cc()

    root = tempfile.mkdtemp(prefix="ddprun_bench_")
    try:
        # Snapshot the binary so a concurrent rebuild cannot change it mid-benchmark.
        ddprun = benchlib.snapshot(ddprun_src, root, "ddprun")
        worker = benchlib.compile_worker(cc, WORKER_C, root)

        ddprun_ver = benchlib.ddprun_version(ddprun)
        torch_ver = benchlib.torch_version(torchrun)
        model = benchlib.cpu_model()

        R = Runner(root)
        launchers = [("ddprun", ddprun), ("torchrun", torchrun)]
        common = ["--standalone"]
        problems = []

        def launch_cmd(exe, name, n, extra, prog):
            logd = fresh_dir(root, "logs_" + name)
            return [exe] + common + ["--nproc_per_node=%d" % n, "--log_dir", logd] + extra + ["--no_python"] + prog

        benchlib.print_launcher_header("ddprun vs torchrun launcher benchmark", ddprun_src,
                                       ddprun_ver, torchrun, torch_ver, model)
        print("#  common flags: %s, OMP_NUM_THREADS=1, workers: compiled C program" % " ".join(common))
        print("#  runs: %d per measurement per launcher (median)%s" % (runs, ", quick" if args.quick else ""))
        print("#  launch: nproc=%d /bin/true; RSS poll every %g ms (separate runs)" % (nproc_launch, args.poll_ms))
        print("#  failure/restart: nproc=%d, local rank 0 exits 3 after %g s, others sleep 30 s" % (nproc_fail, fail_delay))
        print("#  tee: nproc=2, %d lines each, --tee 3, launcher stdout -> file" % tee_lines)
        print("#")
        sys.stdout.flush()

        res = {}  # (test, metric) -> {launcher: [values]}

        def add(test, metric, who, v):
            res.setdefault((test, metric), {}).setdefault(who, []).append(v)

        for who, exe in launchers:
            # 1. launch and exit of 8 workers running /bin/true
            for i in range(runs):
                r = R.run(launch_cmd(exe, who, nproc_launch, [], ["/bin/true"]))
                if r["rc"] != 0:
                    problems.append("%s launch run %d: exit code %d" % (who, i, r["rc"]))
                add("launch", "wall", who, r["wall_s"] * 1e3)
            for i in range(runs):
                r = R.run(launch_cmd(exe, who, nproc_launch, [], ["/bin/true"]), poll_ms=args.poll_ms)
                if r["rc"] != 0:
                    problems.append("%s launch(rss) run %d: exit code %d" % (who, i, r["rc"]))
                if r["hwm_kb"] is None:
                    problems.append("%s launch(rss) run %d: no VmHWM sample" % (who, i))
                else:
                    add("launch", "peak_rss", who, r["hwm_kb"] / 1024.0)

            # 2. failure latency
            for i in range(runs):
                d = fresh_dir(root, "fail")
                r = R.run(launch_cmd(exe, who, nproc_fail, [], [worker, "fail", d, str(fail_delay), "3"]))
                want = 3 if who == "ddprun" else 1
                if r["rc"] != want:
                    problems.append("%s failure run %d: exit code %d, expected %d" % (who, i, r["rc"], want))
                try:
                    add("failure", "latency", who, (r["end_time"] - read_ts(os.path.join(d, "fail_ts"))) * 1e3)
                except OSError:
                    problems.append("%s failure run %d: worker left no timestamp" % (who, i))
                add("failure", "exit_code", who, r["rc"])
                add("failure", "wall", who, r["wall_s"] * 1e3)

            # 3. restart latency
            for i in range(runs):
                d = fresh_dir(root, "restart")
                r = R.run(launch_cmd(exe, who, nproc_fail, ["--max_restarts=1"],
                                     [worker, "restart", d, str(fail_delay), "3"]))
                if r["rc"] != 0:
                    problems.append("%s restart run %d: exit code %d, expected 0" % (who, i, r["rc"]))
                starts = [read_ts(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("start_1_")]
                if len(starts) != nproc_fail or not os.path.exists(os.path.join(d, "fail_ts")):
                    problems.append("%s restart run %d: %d attempt-1 workers started, expected %d"
                                    % (who, i, len(starts), nproc_fail))
                if starts and os.path.exists(os.path.join(d, "fail_ts")):
                    add("restart", "latency", who, (min(starts) - read_ts(os.path.join(d, "fail_ts"))) * 1e3)

            # 4. tee throughput
            for i in range(runs):
                out = os.path.join(root, "tee_out_%s.txt" % who)
                r = R.run(launch_cmd(exe, who, 2, ["--tee", "3"], [worker, "print", "x", str(tee_lines)]),
                          stdout_path=out)
                err = check_tee_output(out, tee_lines)
                if r["rc"] != 0:
                    problems.append("%s tee run %d: exit code %d" % (who, i, r["rc"]))
                if err:
                    problems.append("%s tee run %d: wrong output: %s" % (who, i, err))
                add("tee", "correct_runs", who, 0 if (err or r["rc"] != 0) else 1)
                add("tee", "wall", who, r["wall_s"] * 1e3)
                add("tee", "throughput", who, 2 * tee_lines / r["wall_s"])
                if r["cpu_s"] is not None:
                    add("tee", "launcher_cpu", who, r["cpu_s"] * 1e3)
            os.remove(out)

        # Rows: (test, metric, unit, fmt, goal description, goal predicate on (d, t) or None)
        rows = [
            ("launch", "wall", "ms", "%.1f", "d <= t/50", lambda d, t: d * 50 <= t),
            ("launch", "peak_rss", "MiB", "%.2f", "d < 15 MB", lambda d, t: d * 1048576 < 15e6),
            ("failure", "latency", "ms", "%.2f", "d < 20 ms", lambda d, t: d < 20),
            ("failure", "exit_code", "-", "%.0f", "d == 3", lambda d, t: d == 3),
            ("failure", "wall", "ms", "%.1f", "-", None),
            ("restart", "latency", "ms", "%.2f", "d < 20 ms", lambda d, t: d < 20),
            ("tee", "wall", "ms", "%.1f", "-", None),
            ("tee", "throughput", "lines/s", "%.0f", "-", None),
            ("tee", "launcher_cpu", "ms", "%.0f", "-", None),
            ("tee", "correct_runs", "runs", "%.0f", "all runs", lambda d, t: d == runs and t == runs),
        ]
        hdr = "#  %-8s %-13s %-8s %12s %12s %10s  %-14s %s" % (
            "test", "metric", "unit", "ddprun", "torchrun", "d/t", "goal", "status")
        print(hdr)
        goals_total = goals_met = 0
        spreads = []
        for test, metric, unit, fmt, goal, pred in rows:
            vals = res.get((test, metric), {})
            dv, tv = vals.get("ddprun"), vals.get("torchrun")
            if metric == "correct_runs":
                d = sum(dv) if dv else 0
                t = sum(tv) if tv else 0
            else:
                d = benchlib.median_or_none(dv)
                t = benchlib.median_or_none(tv)
            ds = (fmt % d) if d is not None else "n/a"
            ts = (fmt % t) if t is not None else "n/a"
            ratio = ("%.4f" % (d / t)) if (d is not None and t and unit != "-") else "-"
            status = "-"
            if pred is not None:
                goals_total += 1
                ok = d is not None and t is not None and pred(d, t)
                goals_met += ok
                status = "met" if ok else "MISSED"
            print("   %-8s %-13s %-8s %12s %12s %10s  %-14s %s" % (test, metric, unit, ds, ts, ratio, goal, status))
            if metric not in ("correct_runs", "exit_code"):
                for who, v in (("ddprun", dv), ("torchrun", tv)):
                    if v:
                        spreads.append("#   %-8s %-13s %-8s: min %s max %s" % (
                            test, metric, who, fmt % min(v), fmt % max(v)))
        print("#")
        print("#  min/max over runs:")
        for s in spreads:
            print(s)
        return benchlib.print_footer(goals_met, goals_total, problems)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
