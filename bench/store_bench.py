#!/usr/bin/env python3
"""Store throughput: ddprun's TCPStore-compatible server against PyTorch's.

Starts both servers side by side (ddprun's through build/tests/store_host,
PyTorch's libuv TCPStore in a python subprocess) and drives both with the same
client, build/bench/store_bench (ddprun's StoreClient):

  ops    CLIENTS connections loop SET/GET/ADD for SECONDS; median of RUNS.
  fanin  N connections WAIT on one key; time from the SET to the last reply.
  idle   server RSS (VmRSS) before and after N idle validated connections.

Prints an nccl-tests style report and exits non-zero on FAILED (a goal missed
or a check failed). Run with the venv's python (it needs torch):
  ~/.cache/ddprun/venv/bin/python bench/store_bench.py [--quick]
"""
import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import time

import benchlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_SERVER = r"""
import resource, sys, datetime
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True,
                      wait_for_workers=False, timeout=datetime.timedelta(seconds=900))
print("port", store.port, flush=True)
sys.stdin.read()
"""


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Server:
    def __init__(self, name, argv):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True,
                                     preexec_fn=raise_nofile)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            raise RuntimeError(f"{name} server did not start: {line!r}")
        self.port = int(line.split()[1])

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def run_bench(bench, args, timeout):
    """Runs store_bench; returns (ok, {key: value}) from its `key value...` lines."""
    try:
        r = subprocess.run([bench] + args, capture_output=True, text=True, timeout=timeout,
                           preexec_fn=raise_nofile)
    except subprocess.TimeoutExpired:
        return False, {"error": f"timed out after {timeout} s"}
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if parts[0] == "ops":
            out["ops_" + parts[1]] = float(parts[3])
        elif len(parts) >= 2:
            out[parts[0]] = parts[1]
    if r.returncode != 0:
        out["error"] = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    return r.returncode == 0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/bench/store_bench"))
    ap.add_argument("--store-host", default=os.path.join(ROOT, "build/tests/store_host"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--fanin", type=int, default=10000)
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--timeout", type=int, default=600, help="per store_bench run, seconds")
    ap.add_argument("--quick", action="store_true",
                    help="fan-in and idle with 300 connections, 1 fan-in run")
    a = ap.parse_args()
    fanin_runs = a.runs
    if a.quick:
        a.fanin, a.idle, fanin_runs = 300, 300, 1

    import torch
    servers = {}
    t_start = time.time()
    # No token; fan-in and idle open 10000 connections from one host: over the default cap.
    servers["ddprun"] = Server("ddprun", [a.store_host, "127.0.0.1", "0", "-",
                                          "per_host=1000000"])
    servers["pytorch"] = Server("pytorch", [sys.executable, "-c", TORCH_SERVER])
    names = ["ddprun", "pytorch"]
    failures = []
    res = {n: {} for n in names}
    try:
        # Memory first, on fresh servers, so earlier load does not inflate the baseline.
        for n in names:
            s = servers[n]
            time.sleep(0.5)
            before = s.rss_kib()
            p = subprocess.Popen([a.bench, "idle", "127.0.0.1", str(s.port), str(a.idle)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, preexec_fn=raise_nofile)
            line = p.stdout.readline()
            if not line.startswith("ready"):
                p.kill()
                failures.append(f"{n} idle: {p.stderr.read().strip()[-200:]}")
                continue
            time.sleep(1.0)
            after = s.rss_kib()
            p.stdin.close()
            p.wait()
            res[n]["rss_before"] = before
            res[n]["rss_after"] = after
            res[n]["per_conn"] = (after - before) * 1024 / a.idle

        # Ops: interleave the servers, alternating which goes first.
        ops = {n: {"set": [], "get": [], "add": [], "total": []} for n in names}
        for r in range(a.runs):
            for n in (names if r % 2 == 0 else names[::-1]):
                ok, out = run_bench(a.bench, ["ops", "127.0.0.1", str(servers[n].port),
                                              str(a.clients), str(a.seconds)], a.timeout)
                if not ok:
                    failures.append(f"{n} ops run {r}: {out.get('error')}")
                    continue
                for k in ops[n]:
                    ops[n][k].append(out["ops_" + k])
        for n in names:
            for k, v in ops[n].items():
                if v:
                    res[n]["ops_" + k] = benchlib.med_min_max(v)

        fan = {n: [] for n in names}
        setup = {n: [] for n in names}
        for r in range(fanin_runs):
            for n in (names if r % 2 == 0 else names[::-1]):
                ok, out = run_bench(a.bench, ["fanin", "127.0.0.1", str(servers[n].port),
                                              str(a.fanin)], a.timeout)
                if not ok:
                    failures.append(f"{n} fanin run {r}: {out.get('error')}")
                    continue
                fan[n].append(float(out["fanin_s"]) * 1e3)
                setup[n].append(float(out["setup_s"]))
        for n in names:
            if fan[n]:
                res[n]["fanin"] = benchlib.med_min_max(fan[n])
                res[n]["setup"] = benchlib.med_min_max(setup[n])
    finally:
        for s in servers.values():
            s.stop()
    elapsed = time.time() - t_start

    print("# store_bench: ddprun store server vs PyTorch TCPStore (libuv), same client "
          "(ddprun StoreClient)")
    print(f"# host {platform.node()}  cpus {os.cpu_count()}  kernel {platform.release()}  "
          f"torch {torch.__version__}  date {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC")
    print(f"# ops: {a.clients} clients x {a.seconds:g} s, median of {a.runs} "
          f"(GET = WAIT + GET, 2 round trips)")
    print(f"# fanin: {a.fanin} waiters, median of {fanin_runs}; idle: {a.idle} connections; "
          f"RLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[1]}")
    print("#")
    hdr = f"#{'metric':>22} {'unit':>9} {'ddprun':>12} {'pytorch':>12} {'d/p':>7} " \
          f"{'goal':>10} {'status':>7}   min..max (ddprun | pytorch)"
    print(hdr)

    def fmt(v, digits):
        return "-" if v is None else f"{v:.{digits}f}"

    def row(metric, unit, key, goal, digits=1, higher_better=True):
        d = res["ddprun"].get(key)
        p = res["pytorch"].get(key)
        dv = d[0] if isinstance(d, tuple) else d
        pv = p[0] if isinstance(p, tuple) else p
        ratio = dv / pv if dv is not None and pv else None
        status = "-"
        if goal:
            if dv is None or pv is None:
                status = "FAIL"
            else:
                met = dv >= pv if higher_better else dv <= pv
                status = "ok" if met else "FAIL"
            if status == "FAIL":
                failures.append(f"goal missed: {metric}")
        spread = ""
        if isinstance(d, tuple) or isinstance(p, tuple):
            spread = " | ".join(
                f"{fmt(x[1], digits)}..{fmt(x[2], digits)}" if isinstance(x, tuple) else "-"
                for x in (d, p))
        goal_s = goal or "report"
        print(f" {metric:>22} {unit:>9} {fmt(dv, digits):>12} {fmt(pv, digits):>12} "
              f"{fmt(ratio, 2):>7} {goal_s:>10} {status:>7}   {spread}")

    row("ops/set", "ops/s", "ops_set", ">= pytorch")
    row("ops/get", "ops/s", "ops_get", ">= pytorch")
    row("ops/add", "ops/s", "ops_add", ">= pytorch")
    row("ops/total", "ops/s", "ops_total", ">= pytorch")
    row(f"fanin/{a.fanin}", "ms", "fanin", "<= pytorch", 2, higher_better=False)
    row(f"fanin_setup/{a.fanin}", "s", "setup", None, 2)
    row("idle/rss_before", "KiB", "rss_before", None, 0)
    row(f"idle/rss_after/{a.idle}", "KiB", "rss_after", None, 0)
    row("idle/per_connection", "bytes", "per_conn", None, 0)
    print("#")
    print("# pytorch RSS is the whole python process hosting the store (interpreter and torch "
          "included in the baseline)")
    for f in failures:
        print(f"# FAILURE: {f}")
    print(f"# elapsed {elapsed:.0f} s")
    print("# " + ("FAILED" if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
