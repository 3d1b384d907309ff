#!/usr/bin/env python3
"""Chaos suite for elastic (c10d) multi-node ddprun runs: real processes, real faults.

Each round runs one elastic job of 2-3 agents on this machine (127.0.0.1 hosts the rendezvous
store, 127.0.0.2 and 127.0.0.3 join it, each agent with --local_addr), 2 workers per agent.
Every worker is a small /bin/sh wrapper that records its environment, runs examples/train on the
CPU and records its checksum, exit code and end time. A seeded plan injects one or two faults at
a random moment (startup, training, or the final exit wait right after workers finish):

  kill_worker      SIGKILL a running worker (--max_restarts=3)
  kill_worker_mr0  SIGKILL a running worker with --max_restarts=0
  kill_agent       SIGKILL a non-host agent
  stop_agent       SIGSTOP an agent (host or not) for 0.5-6 s, then SIGCONT
  kill_host        SIGKILL the agent hosting the store
  none             a clean round

and checks, per round (violation names in brackets):

  (a) the workers of one formed rendezvous round agree on WORLD_SIZE [world_mismatch],
      TORCHELASTIC_RESTART_COUNT [restart_count_mismatch] and TORCHELASTIC_RUN_ID
      [run_id_mismatch]; their ranks are distinct [dup_rank], below WORLD_SIZE and
      GROUP_RANK*2+LOCAL_RANK [bad_rank];
  (b) once every rank of a round has exited 0 with its checksum, no worker starts again
      [rerun_after_success];
  (c) every agent ends within --bound seconds of the round start [hung];
  (d) the agents that were not SIGKILLed exit with the same code [exit_mismatch] and name the
      same root cause (exit code and rank; or the store gone, when its host was killed: their
      workers may end by themselves for 5 s first, and fail of the peers gone with it)
      [cause_mismatch]; but an agent SIGSTOPped past the
      keep-alive limit is lost by contract, and one that comes back to a store that is gone
      (the job ended without it) exits 1 saying it may have been dropped: not compared;
  (e) when only agents were lost or paused (no worker killed, host not killed), no agent gives
      up with "no restarts left" nor prints a worker failure report [no_restarts_left_agent_fault];
  a worker that exits 0 prints the checksum of `train --reference --world-size WORLD_SIZE`
      within --checksum_rel (Gloo sums in another order than --reference), the same as every
      rank of its round and every other round of that world size in the run, exactly
      [checksum_mismatch]; when the job succeeds, its last round has every rank exiting 0 with
      a checksum, but those of a SIGKILLed agent [incomplete_final_round];
  a clean round, or one whose faults were only worker kills within --max_restarts, succeeds
      [unexpected_failure]; with 3 agents, losing one non-host agent still succeeds
      [lost_node_job_failed];
  no process carrying the round's marker (CHAOS_ROUND=<uuid> in /proc/*/environ) survives the
      agents by more than 5 s: an agent or a worker (the wrapper) [orphans], a process a worker
      started (train under the wrapper, which ties it to itself with a parent-death signal, so
      this catches only what escapes that) [orphan_grandchildren].

Round k of a run uses seed --seed + k; `--seed S --rounds 1` reruns the round printed with seed
S alone (the fault plan is the same; the moment a fault hits still depends on timing, and a
"train@N%" moment is N% of the training time measured by the run's earlier rounds, which a lone
rerun takes from built-in defaults: rerun a timing-sensitive seed a few times).

The plan is made in chaos_plan.py, the checks (a) to (e) are in chaos_checks.py, and the
helpers that find the round's processes in chaos_procs.py. Only the Python standard library; only 127.0.0.x addresses; every process it starts is killed
at the end of its round. Exit status: 0 when no round found a violation, 1 otherwise, 2 on a
usage or setup error.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from chaos_checks import RoundChecks, reference
from chaos_plan import (ADDRS, NPROC, ORPHAN_GRACE, POLL, RDZV_CONF, TRAIN_FLAGS, make_plan,
                        plan_text, train_estimate)
from chaos_procs import (base_env, cmdline, free_port, has_marker, listening, marked_pids, node_of,
                         parse_kv, ppid_of, signal_pid)

WRAPPER = r'''#!/bin/sh
# chaos worker: records its start, runs train, records its end. Files: s.PID (start),
# o.PID (train output), e.PID (end) under $CHAOS_DIR/w.
d="$CHAOS_DIR/w"
pos=$(stat -c %s "$CHAOS_AGENT_LOG" 2>/dev/null || echo -1)
printf 'pid=%s node=%s rank=%s local_rank=%s world=%s group_rank=%s restart=%s run_id=%s master=%s:%s logpos=%s t=%s\n' \
  "$$" "$CHAOS_NODE" "$RANK" "$LOCAL_RANK" "$WORLD_SIZE" "$GROUP_RANK" \
  "$TORCHELASTIC_RESTART_COUNT" "$TORCHELASTIC_RUN_ID" "$MASTER_ADDR" "$MASTER_PORT" \
  "$pos" "$(date +%s.%N)" > "$d/s.$$.tmp" && mv "$d/s.$$.tmp" "$d/s.$$"
# train dies with this wrapper (as the wrapper dies with its agent): the suite measures the
# elastic logic; containing a worker's own children is the supervisor's business, tested apart.
# (A parent-death signal set after the parent died never fires: the parent is checked after.)
"$CHAOS_PYTHON" -c 'import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
if os.getppid() != int(sys.argv[1]):
    os._exit(137)
os.execv(sys.argv[2], sys.argv[2:])' $$ "$CHAOS_TRAIN" --steps "$CHAOS_STEPS" __TRAIN_FLAGS__ > "$d/o.$$" 2>&1
rc=$?
cs=$(sed -n 's/^rank [0-9]* checksum \([^ ]*\)$/\1/p' "$d/o.$$" | head -n 1)
printf 'pid=%s rc=%s checksum=%s t=%s\n' "$$" "$rc" "${cs:-none}" "$(date +%s.%N)" \
  > "$d/e.$$.tmp" && mv "$d/e.$$.tmp" "$d/e.$$"
exit $rc
'''

class Stop(Exception):
    """SIGTERM/SIGINT: end the round, clean up, report."""


def log(msg, out=sys.stdout):
    out.write(msg + "\n")
    out.flush()


# --------------------------------------------------------------------------- one round

class Agent:
    def __init__(self, idx, proc, log_path, started):
        self.idx = idx
        self.proc = proc
        self.log_path = log_path
        self.started = started
        self.ended = None  # time it exited (or was killed)
        self.rc = None
        self.killed = False  # SIGKILLed by the plan
        self.stopped_until = None  # SIGSTOPped by the plan, SIGCONT due then
        self.paused_for = 0.0  # the longest SIGSTOP it got (seconds)
        self.hung = False  # still running at the bound (then SIGKILLed)

    def alive(self):
        return self.ended is None

    def poll(self, now):
        if self.ended is None:
            rc = self.proc.poll()
            if rc is not None:
                self.rc = rc
                self.ended = now
        return self.ended is not None

    def text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()
        except OSError:
            return b""


class Round(RoundChecks):
    def __init__(self, args, seed, workdir):
        self.args = args
        self.plan = make_plan(seed)
        self.seed = seed
        self.dir = os.path.join(workdir, f"round-{seed}")
        self.marker = str(uuid.uuid4())
        self.agents = []
        self.starts = {}  # pid -> start record
        self.ends = {}  # pid -> end record
        self.killed_workers = set()  # pids this run SIGKILLed
        self.fired = []  # what each fault did
        self.violations = []  # (name, detail)
        self.t0 = None
        self.port = None

    # ------------------------------------------------------------------ running

    def violate(self, name, detail):
        self.violations.append((name, detail))

    def launch(self, idx, wrapper):
        addr = ADDRS[idx]
        log_path = os.path.join(self.dir, f"agent{idx}.log")
        env = base_env()
        env.update(CHAOS_ROUND=self.marker, CHAOS_DIR=self.dir, CHAOS_NODE=addr,
                   CHAOS_AGENT_LOG=log_path, CHAOS_TRAIN=self.args.train,
                   CHAOS_PYTHON=sys.executable,
                   CHAOS_STEPS=str(self.args.steps))
        cmd = [self.args.ddprun, "--rdzv_backend=c10d",
               f"--rdzv_endpoint=127.0.0.1:{self.port}", f"--rdzv_id=chaos{self.seed}",
               f"--nnodes=2:{self.plan['nagents']}", f"--nproc_per_node={NPROC}",
               f"--max_restarts={self.plan['max_restarts']}", "--monitor_interval=0.1",
               "--shutdown_timeout=2", f"--rdzv_conf={RDZV_CONF}",
               f"--log_dir={os.path.join(self.dir, 'logs' + str(idx))}",
               f"--local_addr={addr}", wrapper]
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=self.dir)
        agent = Agent(idx, proc, log_path, time.monotonic())
        self.agents.append(agent)
        return agent

    def scan_workers(self):
        wdir = os.path.join(self.dir, "w")
        try:
            names = os.listdir(wdir)
        except OSError:
            return
        for name in names:
            kind, _, pid = name.partition(".")
            if not pid.isdigit() or kind not in ("s", "e"):
                continue
            pid = int(pid)
            table = self.starts if kind == "s" else self.ends
            if pid in table:
                continue
            try:
                with open(os.path.join(wdir, name)) as f:
                    line = f.read()
            except OSError:
                continue
            if not line.endswith("\n"):
                continue
            rec = parse_kv(line)
            rec["pid"] = pid
            rec["seen"] = time.time()
            table[pid] = rec

    def live_workers(self):
        out = []
        for pid, s in self.starts.items():
            if pid not in self.ends and has_marker(pid, self.marker):
                out.append((s.get("node", ""), s.get("local_rank", ""), pid))
        return sorted(out)

    def moment_time(self, f, all_started):
        """Monotonic time the fault is due, or None while its moment has not come."""
        if f["moment"] == "startup":
            return all_started + f["delay"]
        if f["moment"] == "train":
            if not self.starts:
                return None
            first = min(self.starts.values(), key=lambda s: s["seen_mono"])
            world = int(first["world"]) if first.get("world", "").isdigit() else 0
            return first["seen_mono"] + f["frac"] * train_estimate(self.args.steps, world)
        ok = [e["seen_mono"] for e in self.ends.values() if e.get("rc") == "0"]
        if not ok:
            return None
        # The first rank to finish: the others end within ~0.1 s, then the agents' exit wait.
        return min(ok) + f["delay"]

    def fire(self, f, now):
        kind = f["kind"]
        at = round(now - self.t0, 2)
        if kind in ("kill_worker", "kill_worker_mr0"):
            live = self.live_workers()
            if not live:
                return {"kind": kind, "at": at, "fired": False, "why": "no live worker"}
            node, lr, pid = live[int(f["pick"] * len(live))]
            ok = signal_pid(pid, signal.SIGKILL)
            # Killed after writing its end record (not yet seen here) but before it exited:
            # ddprun sees SIGKILL, whatever the record says (check (b) goes by the kill).
            self.killed_workers.add(pid)
            return {"kind": kind, "at": at, "fired": ok, "pid": pid, "node": node,
                    "local_rank": lr, "rank": self.starts[pid].get("rank")}
        agent = self.agents[f["target"]] if f["target"] < len(self.agents) else None
        if agent is None or not agent.alive() or agent.killed:
            return {"kind": kind, "at": at, "fired": False, "why": "agent gone",
                    "target": f["target"]}
        if kind in ("kill_agent", "kill_host"):
            if agent.stopped_until is not None:
                signal_pid(agent.proc.pid, signal.SIGCONT)
                agent.stopped_until = None
            ok = signal_pid(agent.proc.pid, signal.SIGKILL)
            agent.killed = ok
            return {"kind": kind, "at": at, "fired": ok, "target": f["target"]}
        # stop_agent
        ok = signal_pid(agent.proc.pid, signal.SIGSTOP)
        if ok:
            agent.stopped_until = now + f["pause"]
            agent.paused_for = max(agent.paused_for, f["pause"])
        return {"kind": kind, "at": at, "fired": ok, "target": f["target"], "pause": f["pause"]}

    def run(self, wrapper):
        os.makedirs(os.path.join(self.dir, "w"), exist_ok=True)
        bound = self.args.bound
        self.port = free_port()
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        deadline = self.t0 + bound
        host = self.launch(0, wrapper)
        while not listening(self.port):
            if host.proc.poll() is not None or time.monotonic() > self.t0 + 10:
                self.violate("setup_failed", f"the store host did not listen on {self.port} "
                             f"(rc={host.proc.poll()})")
                self.finish(deadline)
                return
            time.sleep(POLL)
        for idx in range(1, self.plan["nagents"]):
            due = time.monotonic() + self.plan["stagger"][idx]
            while time.monotonic() < due:
                time.sleep(POLL)
            self.launch(idx, wrapper)
        all_started = time.monotonic()
        pending = list(self.plan["faults"])
        # Faults whose moment never comes are skipped once the job is over.
        while True:
            now = time.monotonic()
            n_starts, n_ends = len(self.starts), len(self.ends)
            self.scan_workers()
            for table, n in ((self.starts, n_starts), (self.ends, n_ends)):
                if len(table) != n:
                    for rec in table.values():
                        rec.setdefault("seen_mono", now)
            for a in self.agents:
                a.poll(now)
                if a.stopped_until is not None and (now >= a.stopped_until or not a.alive()):
                    signal_pid(a.proc.pid, signal.SIGCONT)
                    a.stopped_until = None
            for f in list(pending):
                due = self.moment_time(f, all_started)
                if due is not None and now >= due:
                    pending.remove(f)
                    self.fired.append(self.fire(f, now))
            if all(not a.alive() or a.killed for a in self.agents):
                break
            if now > deadline:
                break
            time.sleep(POLL)
        for f in pending:
            self.fired.append({"kind": f["kind"], "fired": False, "why": "moment never came"})
        self.finish(deadline)

    def finish(self, deadline):
        """Ends the round: SIGCONT, the hang bound, SIGKILL of everything left, orphans."""
        for a in self.agents:
            if a.stopped_until is not None:
                signal_pid(a.proc.pid, signal.SIGCONT)
                a.stopped_until = None
        # Killed agents: reap them.
        for a in self.agents:
            if a.killed:
                try:
                    a.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
                a.poll(time.monotonic())
        hung = []
        for a in self.agents:
            a.poll(time.monotonic())
            if a.alive():
                hung.append(a)
        for a in hung:
            a.hung = True
        if hung:
            self.violate("hung", "agents " + ",".join(f"a{a.idx}" for a in hung) +
                         f" still running {self.args.bound:.0f} s after the round start")
            for a in hung:
                signal_pid(a.proc.pid, signal.SIGKILL)
            for a in hung:
                try:
                    a.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
                a.poll(time.monotonic())
        self.end_mono = max([a.ended for a in self.agents if a.ended is not None and
                             not a.killed] or [time.monotonic()])
        # Orphans: anything with the marker once the agents are gone.
        grace = time.monotonic() + ORPHAN_GRACE
        left = marked_pids(self.marker)
        while left and time.monotonic() < grace:
            time.sleep(0.1)
            left = marked_pids(self.marker)
        if left:
            # A worker's own children (train under the wrapper) are not the worker ddprun
            # started: they are named apart (orphan_grandchildren) from workers and agents.
            direct = [p for p in left if os.path.basename(cmdline(p).split(" ")[0]) in
                      ("sh", "chaos_worker.sh", "ddprun") or "chaos_worker.sh" in cmdline(p)]
            for name, pids in (("orphans", direct),
                               ("orphan_grandchildren", [p for p in left if p not in direct])):
                if pids:
                    what = "; ".join(f"{p} (node {node_of(p)}, ppid {ppid_of(p)}) {cmdline(p)}"
                                     for p in pids[:3])
                    self.violate(name, f"{len(pids)} alive {ORPHAN_GRACE:.0f} s after the "
                                 f"agents ended: {what}")
            for p in left:
                signal_pid(p, signal.SIGKILL)
            time.sleep(0.2)
        self.scan_workers()

    def kill_everything(self):
        for a in self.agents:
            signal_pid(a.proc.pid, signal.SIGCONT)
            signal_pid(a.proc.pid, signal.SIGKILL)
        for p in marked_pids(self.marker):
            signal_pid(p, signal.SIGKILL)
        for a in self.agents:
            try:
                a.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def summary(self):
        survivors = [a for a in self.agents if not a.killed]
        return {
            "seed": self.seed,
            "plan": self.plan,
            "plan_text": plan_text(self.plan),
            "fired": self.fired,
            "exit_codes": {f"a{a.idx}": ("KILLED" if a.killed else "HUNG" if a.hung else a.rc)
                           for a in self.agents},
            "time_to_end": round(self.end_mono - self.t0, 2),
            "survivor_exit_times": {f"a{a.idx}": round(a.ended - self.t0, 2)
                                    for a in survivors if a.ended is not None},
            "workers_started": len(self.starts),
            "rdzv_rounds": sorted({s["rdzv"] for s in self.starts.values()
                                   if s.get("rdzv") is not None}),
            "violations": [{"name": n, "detail": d} for n, d in self.violations],
            "dir": self.dir,
        }


# --------------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ddprun", required=True, help="the ddprun binary under test")
    p.add_argument("--train", required=True, help="examples/train of the same build")
    p.add_argument("--budget", type=float, default=300, help="seconds for all rounds (300)")
    p.add_argument("--seed", type=int, default=None, help="seed of round 0 (round k: seed+k)")
    p.add_argument("--rounds", type=int, default=None, help="at most this many rounds")
    p.add_argument("--report", default=None, help="write a JSON summary here")
    p.add_argument("--checksum_rel", type=float, default=1e-5,
                   help="relative tolerance against train --reference (1e-5)")
    p.add_argument("--steps", type=int, default=160,
                   help="train --steps (a clean job takes ~2-4 s on 2 cores) (160)")
    p.add_argument("--bound", type=float, default=60,
                   help="seconds from a round's start by which every agent must have exited (60)")
    p.add_argument("--workdir", default=None,
                   help="where round directories go (default: a new /tmp/chaos-* directory)")
    p.add_argument("--keep", action="store_true",
                   help="keep every round's directory (default: only rounds with violations)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each round's violations in full and the fired faults")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    for path in (args.ddprun, args.train):
        if not os.access(path, os.X_OK):
            log(f"chaos: {path}: not an executable", sys.stderr)
            return 2
    args.ddprun = os.path.abspath(args.ddprun)
    args.train = os.path.abspath(args.train)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 20) * 1000
    start = time.monotonic()
    workdir = args.workdir or tempfile.mkdtemp(prefix="chaos-")
    os.makedirs(workdir, exist_ok=True)
    wrapper = os.path.join(workdir, "chaos_worker.sh")
    with open(wrapper, "w") as f:
        f.write(WRAPPER.replace("__TRAIN_FLAGS__", " ".join(TRAIN_FLAGS)))
    os.chmod(wrapper, 0o755)

    def on_signal(signum, _frame):
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    log(f"chaos: ddprun {args.ddprun}\nchaos: train {args.train} --steps {args.steps} "
        f"{' '.join(TRAIN_FLAGS)}\nchaos: seed {args.seed}, budget {args.budget:.0f} s, "
        f"bound {args.bound:.0f} s, work dir {workdir}")
    try:
        for w in (2 * NPROC, 3 * NPROC):
            log(f"chaos: reference checksum, world size {w}: "
                f"{reference(args.train, args.steps, w)}")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"chaos: {e}", sys.stderr)
        return 2
    header = (f"{'#':>3} {'seed':>10} {'ag':>2} {'mr':>2}  {'faults (fired)':<58} "
              f"{'exit codes':<22} {'end s':>6}  violations")
    log(header)
    log("-" * len(header))
    results = []
    stopped = None
    # A round must be able to end (the bound, the orphan grace, clean-up) within the budget.
    per_round_max = args.bound + ORPHAN_GRACE + 12
    k = 0
    while True:
        if args.rounds is not None and k >= args.rounds:
            break
        if time.monotonic() - start + per_round_max > args.budget:
            break
        seed = args.seed + k
        rnd = Round(args, seed, workdir)
        try:
            rnd.run(wrapper)
            rnd.check()
        except Stop as e:
            stopped = str(e)
            rnd.kill_everything()
            break
        except Exception:
            rnd.kill_everything()
            raise
        s = rnd.summary()
        results.append(s)
        fired = ",".join(f["kind"].replace("_agent", "_ag").replace("kill_worker", "kill_wk") +
                         (f"@a{f['target']}" if "target" in f else "") +
                         (f"/{f['pause']}s" if "pause" in f else "") +
                         (f"({f['at']}s)" if f.get("fired") else "(missed)")
                         for f in s["fired"]) or "none"
        codes = " ".join(f"{v}" for v in s["exit_codes"].values())
        names = sorted({v["name"] for v in s["violations"]})
        log(f"{k:>3} {seed:>10} {s['plan']['nagents']:>2} {s['plan']['max_restarts']:>2}  "
            f"{fired:<58} {codes:<22} {s['time_to_end']:>6.1f}  {' '.join(names) or 'ok'}")
        if args.verbose or names:
            for v in s["violations"]:
                log(f"      - {v['name']}: {v['detail']}")
            if names:
                log(f"      (plan {s['plan_text']}; logs in {s['dir']})")
        if not names and not args.keep:
            shutil.rmtree(rnd.dir, ignore_errors=True)
        k += 1

    failed = [r for r in results if r["violations"]]
    kinds = {}
    for r in results:
        for name in {v["name"] for v in r["violations"]}:
            kinds.setdefault(name, []).append(r["seed"])
    max_end = max((r["time_to_end"] for r in results), default=0.0)
    log("-" * len(header))
    for name, seeds in sorted(kinds.items()):
        log(f"  {name}: {len(seeds)} rounds (seeds {' '.join(map(str, seeds[:8]))}"
            f"{' ...' if len(seeds) > 8 else ''})")
    log(f"{len(results)} rounds, {len(failed)} failed; max time to end {max_end:.1f} s; "
        f"{time.monotonic() - start:.0f} s" + (f"; stopped by {stopped}" if stopped else ""))
    if failed:
        log(f"rerun one round alone: {sys.argv[0]} --ddprun {args.ddprun} --train {args.train} "
            f"--seed SEED --rounds 1 -v")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"ddprun": args.ddprun, "seed": args.seed, "steps": args.steps,
                       "bound": args.bound, "rounds": len(results), "failed": len(failed),
                       "violations": {k: len(v) for k, v in kinds.items()},
                       "violation_seeds": kinds, "max_time_to_end": max_end,
                       "results": results}, f, indent=1)
    if not os.listdir(workdir) or all(n == "chaos_worker.sh" for n in os.listdir(workdir)):
        shutil.rmtree(workdir, ignore_errors=True)
    # The plain closing line CI reads: rounds that held every invariant, rounds that did not.
    log(f"chaos: {len(results) - len(failed)} passed, {len(failed)} failed")
    if stopped:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
