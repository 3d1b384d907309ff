"""The invariants a chaos round checks once it has ended (tests/chaos/chaos.py lists them):
RoundChecks reads the agents' logs and the workers' start and end records."""

import re
import subprocess

from chaos_plan import ADDRS, KEEP_ALIVE_LIMIT, NPROC, TRAIN_FLAGS, note_training
from chaos_procs import base_env

ROUND_RE = re.compile(rb"rendezvous round (\d+) complete: node rank (\d+) of (\d+), world size (\d+)")
ROOT_RE = re.compile(r"Root Cause \(first observed failure\):\s*\n\[0\]:\n(?:.*\n)*?\s*rank\s*:\s*(\d+)"
                     r"[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")
FAILURE_RE = re.compile(r"failure: code=(-?\d+) node \d+ \([^)]*\): rank (\d+)")
# Every agent of a failed job prints the one recorded root cause.
JOB_FAILED_RE = re.compile(r"the job failed: (.*)")
# An agent's last error: the store gone (its host killed) is the cause it names.
LAST_ERROR_RE = re.compile(r"\[ddprun [\d:]+ error\] (.*)")
STORE_GONE_RE = re.compile(r"^rendezvous: store \S+ is gone")

_refs = {}
_ddp_sums = {}  # world size -> (checksum, seed): the first one seen


def reference(train, steps, world):
    """The checksum `train --reference --world-size world` prints (cached)."""
    key = (steps, world)
    if key not in _refs:
        r = subprocess.run([train, "--reference", "--world-size", str(world), "--steps",
                            str(steps), *TRAIN_FLAGS], env=base_env(), capture_output=True,
                           text=True, timeout=120)
        m = re.search(r"reference checksum (\S+)", r.stdout)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"train --reference --world-size {world} failed: rc={r.returncode}"
                               f"\n{r.stdout}\n{r.stderr}")
        _refs[key] = m.group(1)
    return _refs[key]


class RoundChecks:
    """The checks of Round (chaos.py): its agents, worker records, fired faults and plan."""

    def rounds_of_agents(self):
        """Per agent: [(byte offset after the line, rdzv round, node rank, nodes, world)]."""
        out = {}
        for a in self.agents:
            text = a.text()
            out[ADDRS[a.idx]] = [(m.end(), int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                  int(m.group(4))) for m in ROUND_RE.finditer(text)]
        return out

    def attribute(self):
        """Rendezvous round of each worker start: the agent's last 'round N complete' line
        written before the worker started (the wrapper records the log size at start)."""
        marks = self.rounds_of_agents()
        for s in self.starts.values():
            s["rdzv"] = None
            try:
                pos = int(s.get("logpos", "-1"))
            except ValueError:
                pos = -1
            for end, rnd, *_ in marks.get(s.get("node"), []):
                if end <= pos:
                    s["rdzv"] = rnd
        return marks

    def check(self):
        plan = self.plan
        self.attribute()
        fired = [f for f in self.fired if f.get("fired")]
        fired_kinds = {f["kind"] for f in fired}
        worker_killed = bool(fired_kinds & {"kill_worker", "kill_worker_mr0"})
        host_killed = "kill_host" in fired_kinds
        ints = lambda s, k: int(s[k]) if s.get(k, "").lstrip("-").isdigit() else None

        # (a) one formed round: same world size, restart count, run id; distinct valid ranks.
        groups = {}
        for s in self.starts.values():
            if s["rdzv"] is not None:
                groups.setdefault(s["rdzv"], []).append(s)
        for rnd, ws in sorted(groups.items()):
            worlds = {s.get("world") for s in ws}
            restarts = {s.get("restart") for s in ws}
            runs = {s.get("run_id") for s in ws}
            if len(worlds) > 1:
                self.violate("world_mismatch", f"rdzv round {rnd}: WORLD_SIZE {sorted(worlds)}")
            if len(restarts) > 1:
                detail = ", ".join(sorted(f"{s.get('node')}/{s.get('local_rank')}:"
                                          f"{s.get('restart')}" for s in ws))
                self.violate("restart_count_mismatch",
                             f"rdzv round {rnd}: TORCHELASTIC_RESTART_COUNT differs ({detail})")
            if len(runs) > 1:
                self.violate("run_id_mismatch", f"rdzv round {rnd}: run ids {sorted(runs)}")
            ranks = [ints(s, "rank") for s in ws]
            dup = {r for r in ranks if ranks.count(r) > 1}
            if dup:
                self.violate("dup_rank", f"rdzv round {rnd}: ranks {sorted(dup)} twice")
            for s in ws:
                r, w, g, lr = (ints(s, k) for k in ("rank", "world", "group_rank", "local_rank"))
                if None in (r, w, g, lr) or not 0 <= r < w or r != g * NPROC + lr:
                    self.violate("bad_rank", f"rdzv round {rnd}: {s.get('node')} rank={r} "
                                 f"world={w} group_rank={g} local_rank={lr}")
                    break

        # Workers that exited 0 print the checksum of the reference run (within --checksum_rel:
        # Gloo sums in another order than --reference does), every rank of a round exactly the
        # same, and the same as every other DDP run of that world size in this suite run.
        for rnd, ws in sorted(groups.items()):
            sums = {}
            for s in ws:
                e = self.ends.get(s["pid"], {})
                if e.get("rc") == "0":
                    sums[ints(s, "rank")] = e.get("checksum")
            if not sums:
                continue
            w = ints(ws[0], "world")
            if len(set(sums.values())) > 1:
                self.violate("checksum_mismatch", f"rdzv round {rnd}: ranks disagree {sums}")
                continue
            got = next(iter(sums.values()))
            ref = reference(self.args.train, self.args.steps, w) if w else None
            try:
                off = abs(float(got) - float(ref)) / max(abs(float(ref)), 1e-30)
            except (TypeError, ValueError):
                off = float("inf")
            if off > self.args.checksum_rel:
                self.violate("checksum_mismatch", f"rdzv round {rnd} (world {w}): {got} vs "
                             f"reference {ref} (rel {off:.1e} > {self.args.checksum_rel:g})")
                continue
            first = _ddp_sums.setdefault(w, (got, self.seed))
            if got != first[0]:
                self.violate("checksum_mismatch", f"rdzv round {rnd} (world {w}): {got}, but "
                             f"round seed {first[1]} got {first[0]}")

        # (b) a complete round (every rank exited 0 with a checksum) ends the job.
        complete_end = None
        for rnd, ws in sorted(groups.items()):
            w = ints(ws[0], "world")
            done = [s for s in ws if self.ends.get(s["pid"], {}).get("rc") == "0"
                    and self.ends[s["pid"]].get("checksum", "none") != "none"
                    and int(s["pid"]) not in self.killed_workers]
            if w and sorted({ints(s, "rank") for s in done}) == list(range(w)):
                t = max(float(self.ends[s["pid"]]["t"]) for s in done)
                note_training(w, min(float(self.ends[s["pid"]]["t"]) for s in done) -
                              min(float(s["t"]) for s in ws))
                if complete_end is None or t < complete_end[0]:
                    complete_end = (t, rnd)
        if complete_end is not None:
            later = [s for s in self.starts.values() if float(s.get("t", 0)) > complete_end[0]]
            if later:
                s = min(later, key=lambda s: float(s["t"]))
                self.violate("rerun_after_success",
                             f"rdzv round {complete_end[1]} completed, then {len(later)} workers "
                             f"started again (first: {s.get('node')} rank {s.get('rank')} "
                             f"restart {s.get('restart')}, rdzv round {s['rdzv']}, "
                             f"+{float(s['t']) - complete_end[0]:.2f} s)")

        # (d) the agents not SIGKILLed agree on the exit code and the root cause.
        # (Agents SIGKILLed at the bound are reported as hung, not compared.)
        # An agent stopped past the keep-alive limit is lost by contract; if it comes back after
        # the job ended and its store is gone, it can read no outcome, and says so ("may have been
        # dropped from the job", or past the limit "will have taken this node for lost") with
        # exit 1: not compared.
        dropped = [a for a in self.agents if a.paused_for > KEEP_ALIVE_LIMIT and a.rc == 1
                   and (b"may have been dropped from the job" in a.text()
                        or b"will have taken this node for lost" in a.text())]
        survivors = [a for a in self.agents if not a.killed and not a.hung and a.rc is not None
                     and a not in dropped]
        rcs = {a.rc for a in survivors}
        if len(rcs) > 1:
            self.violate("exit_mismatch", ", ".join(f"a{a.idx}={a.rc}" for a in survivors))
        causes = {}
        for a in survivors:
            if a.rc == 0:
                continue
            text = a.text().decode(errors="replace")
            m = ROOT_RE.search(text)
            said = JOB_FAILED_RE.findall(text)
            errors = LAST_ERROR_RE.findall(text)
            if errors and STORE_GONE_RE.match(errors[-1]):
                # No store left to agree through: each agent names the store's loss (its
                # workers' own failures, printed above it, follow from the peers gone with it).
                causes[a.idx] = "the store is gone"
            elif said:
                causes[a.idx] = said[-1].strip()
            elif m:
                code = int(m.group(2))  # torchrun's exitcode: -N for signal N
                causes[a.idx] = (128 - code if code < 0 else code, int(m.group(1)))
            else:
                found = FAILURE_RE.findall(text)
                if found:
                    causes[a.idx] = (int(found[-1][0]), int(found[-1][1]))
        if len(set(causes.values())) > 1:
            self.violate("cause_mismatch", ", ".join(
                f"a{i}={c}" for i, c in sorted(causes.items())))

        # (e) lost or paused agents do not use up restarts.
        if not worker_killed and not host_killed and fired:
            gave_up = [f"a{a.idx}" + ("(report)" if b"Root Cause" in a.text() else "")
                       for a in self.agents if not a.killed and (
                           b"no restarts left" in a.text() or b"Root Cause" in a.text())]
            if gave_up:
                self.violate("no_restarts_left_agent_fault",
                             f"{','.join(gave_up)} failed the job for a worker failure ('no "
                             f"restarts left', --max_restarts={plan['max_restarts']}) though "
                             "only agents were lost/paused")

        # The job's outcome where the plan decides it.
        success = bool(survivors) and rcs == {0}
        only_worker_kills = fired_kinds <= {"kill_worker"} and \
            sum(1 for f in fired if f["kind"] == "kill_worker") <= plan["max_restarts"]
        if not success and survivors and only_worker_kills and not any(
                a.rc is None for a in self.agents) and not self.has("hung"):
            self.violate("unexpected_failure", "exit codes " + ",".join(
                f"a{a.idx}={a.rc}" for a in survivors) +
                (" (clean round)" if not fired else " (worker kills within --max_restarts)"))
        if (not success and plan["nagents"] == 3 and fired_kinds == {"kill_agent"}
                and len(fired) == 1 and not self.has("hung")):
            self.violate("lost_node_job_failed", "one of 3 agents SIGKILLed, exit codes " +
                         ",".join(f"a{a.idx}={a.rc}" for a in survivors))
        if success and groups:
            # Every rank of the last round finished, but those of a node SIGKILLed after the
            # others' workers finished: ddprun completes the job without it (as torchrun).
            last = max(groups)
            ws = groups[last]
            w = ints(ws[0], "world")
            killed = {ADDRS[a.idx] for a in self.agents if a.killed}
            done = {ints(s, "rank") for s in ws if (self.ends.get(s["pid"], {}).get("rc") == "0"
                    and self.ends[s["pid"]].get("checksum", "none") != "none")
                    or s.get("node") in killed}
            if not w or sorted(done) != list(range(w)):
                self.violate("incomplete_final_round",
                             f"exit 0, but rdzv round {last} has ranks {sorted(done)} of {w} "
                             "done")
        elif success and not groups:
            self.violate("incomplete_final_round", "exit 0 without any worker")

    def has(self, name):
        return any(n == name for n, _ in self.violations)
