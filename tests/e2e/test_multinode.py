"""Multi-node runs on one machine: several ddprun agents on loopback, each with its own address
(--local_addr=127.0.0.1, 127.0.0.2, ...), rendezvous over the store (static and c10d).

Workers are /bin/sh loops (or a small PyTorch script for the interop test) that report their
environment into files under tmp_path; the tests poll those files with deadlines, never sleep.

1. static 3x2: ranks, world size, group ranks, MASTER_* and the agent store flag.
2. static timeout: a missing node fails the others with the round and the count joined,
   also an agent that is slow to read it (the store host waits for it, bounded).
3. c10d 2:4 scale-up: a late joiner re-forms the round (not counted as a restart).
4. c10d: SIGKILL of a non-host agent: survivors re-form without it.
5. c10d: SIGKILL of the store host: the others fail promptly ("store ... gone").
6. a worker failure on one node restarts every node's workers; without restarts all fail.
7. different --rdzv_id at the same endpoint: separate jobs, both time out.
8. the job token: a wrong one is refused, the right one works.
9. PyTorch interop: gloo all_reduce through the agent store, across a failure restart.
10. one port: workers get MASTER_PORT == the rendezvous port, no process of the job listens on
    any other port, and a restart round's workers see none of the earlier round's keys.
"""

import json
import os
import re
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, DDPRUN, base_env, free_port, pid_alive, run_ddprun, sh, wait_for

FAST = "join_timeout=20,last_call_timeout=1,keep_alive_interval=0.5,keep_alive_max_attempt=3"
KEEP_ALIVE_LIMIT = 0.5 * 3  # keep_alive_interval * keep_alive_max_attempt
AGENT_TIMEOUT = 30.0
STORE_CLI = BUILD / "tests" / "store_cli"


def addr(i):
    return f"127.0.0.{i + 1}"


def wait_listening(port, host="127.0.0.1", timeout=10.0):
    """Polls until something accepts connections on host:port (the store host is up)."""
    def up():
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            return False
    wait_for(up, timeout, interval=0.05, what=f"a listener on {host}:{port}")


def read(path):
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


def static_args(nnodes, rank, port, nproc=2, conf=None, extra=()):
    args = [f"--nnodes={nnodes}", f"--node_rank={rank}", "--master_addr=127.0.0.1",
            f"--master_port={port}", f"--local_addr={addr(rank)}", f"--nproc_per_node={nproc}",
            "--shutdown_timeout=2"]
    if conf:
        args.append(f"--rdzv_conf={conf}")
    return [*args, *extra]


def c10d_args(nnodes, node, port, nproc=2, rdzv_id="job", conf=FAST, extra=()):
    return ["--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={rdzv_id}",
            f"--nnodes={nnodes}", f"--local_addr={addr(node)}", f"--nproc_per_node={nproc}",
            f"--rdzv_conf={conf}", "--shutdown_timeout=2", *extra]


def node_env(out, node, **kw):
    return base_env(OUTDIR=str(out), NODE=str(node), **kw)


# A worker that records its start (pid, world size, restart count) once, then rewrites a
# per-worker state file every 0.2 s until $OUTDIR/stop exists, then exits 0.
LOOP = r'''
f="$OUTDIR/w_${NODE}_${LOCAL_RANK}"
echo "$$ $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $RANK $GROUP_RANK" >> "$OUTDIR/starts_${NODE}_${LOCAL_RANK}"
while [ ! -e "$OUTDIR/stop" ]; do
  echo "$$ $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $RANK $GROUP_RANK" > "$f.tmp"
  mv "$f.tmp" "$f"
  sleep 0.2
done
exit 0
'''


def state(out, node, local_rank):
    """(pid, world_size, restart_count, rank, group_rank) of the worker's last report, or None."""
    text = read(Path(out) / f"w_{node}_{local_rank}").split()
    return tuple(int(x) for x in text) if len(text) == 5 else None


def starts(out, node, local_rank):
    lines = read(Path(out) / f"starts_{node}_{local_rank}").splitlines()
    return [tuple(int(x) for x in line.split()) for line in lines if len(line.split()) == 5]


def wait_world(out, nodes, nproc, world, timeout=15.0, restarts=None):
    """Waits until every worker of `nodes` reports WORLD_SIZE == world (and, when given,
    TORCHELASTIC_RESTART_COUNT == restarts: an earlier attempt's worker leaves its last state
    until the new one writes); returns their states."""
    def ok():
        states = {(n, lr): state(out, n, lr) for n in nodes for lr in range(nproc)}
        if all(s is not None and s[1] == world and restarts in (None, s[2])
               for s in states.values()):
            return states
        return None
    return wait_for(ok, timeout, interval=0.05,
                    what=f"WORLD_SIZE={world} (restart count {restarts}) on nodes {nodes}")


def stop_and_wait(out, agents, timeout=AGENT_TIMEOUT):
    (Path(out) / "stop").touch()
    return [a.wait(timeout) for a in agents]


def outputs(agents):
    return "\n".join(f"=== agent {i}\n{a.output()}" for i, a in enumerate(agents))


# --------------------------------------------------------------------------- 1. static 3x2

def test_static_3x2_ranks_and_env(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    report = ('echo "$RANK $WORLD_SIZE $GROUP_RANK $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR '
              '$MASTER_PORT $TORCHELASTIC_USE_AGENT_STORE" > "$OUTDIR/n${NODE}_l${LOCAL_RANK}"')
    # Reverse order: the non-host agents come first and wait for node rank 0's store.
    agents = [launch(static_args(3, r, port, extra=sh(report)), env=node_env(out, r))
              for r in (2, 1, 0)]
    rcs = [a.wait(AGENT_TIMEOUT) for a in agents]
    assert rcs == [0, 0, 0], outputs(agents)
    seen = {}
    for node in range(3):
        for lr in range(2):
            f = out / f"n{node}_l{lr}"
            fields = f.read_text().split()
            assert len(fields) == 8, f"{f}: {fields}"
            rank, world, group, local_rank, lws, maddr, mport, agent_store = fields
            assert int(world) == 6
            assert int(group) == node, "GROUP_RANK must follow --node_rank"
            assert int(local_rank) == lr
            assert int(lws) == 2
            assert int(rank) == node * 2 + lr
            assert agent_store == "True"
            seen[int(rank)] = (maddr, mport)
    assert sorted(seen) == list(range(6))
    assert {m for m, _ in seen.values()} == {"127.0.0.1"}
    assert {p for _, p in seen.values()} == {str(port)}, "MASTER_PORT is the rendezvous port"


# --------------------------------------------------------------------------- 2. static timeout

def test_static_timeout_names_round_and_count(launch, tmp_path):
    port = free_port()
    agents = [launch(static_args(3, r, port, conf="timeout=3", extra=sh("exit 0")))
              for r in (0, 1)]
    start = time.monotonic()
    rcs = [a.wait(15) for a in agents]
    elapsed = time.monotonic() - start
    assert all(rc != 0 for rc in rcs), outputs(agents)
    assert elapsed < 10, f"took {elapsed:.1f}s\n{outputs(agents)}"
    # The host's message is checked here; whether the other agent gets the reason too is racy
    # (see the next test, which makes the race deterministic).
    assert_timeout_reason(agents[0].stderr(), agents)


def test_static_node_started_first_waits_for_the_store_host_the_rendezvous_timeout(launch,
                                                                                   tmp_path):
    """Node rank 1 comes up well before node 0: it waits for node 0's store for the static
    backend's `timeout`, as torchrun does, not only the read timeout (it gave up after 60 s by
    default; found by an attacking helper)."""
    port = free_port()
    conf = "timeout=20,read_timeout=1"
    first = launch(static_args(2, 1, port, conf=conf, extra=sh("exit 0")))
    time.sleep(3)  # three read timeouts
    host = launch(static_args(2, 0, port, conf=conf, extra=sh("exit 0")))
    assert [first.wait(AGENT_TIMEOUT), host.wait(AGENT_TIMEOUT)] == [0, 0], outputs([first, host])


def test_static_node_gives_up_on_a_store_that_never_comes_naming_the_setting(launch, tmp_path):
    port = free_port()
    agent = launch(static_args(2, 1, port, conf="timeout=2", extra=sh("exit 0")))
    assert agent.wait(AGENT_TIMEOUT) == 1, agent.output()
    assert (f"store 127.0.0.1:{port} cannot be reached" in agent.stderr() and
            "after 2 s (how long an agent waits for the store at its start: --rdzv_conf "
            "read_timeout under c10d, timeout under static)" in agent.stderr()), agent.output()


def test_static_node_waiting_for_the_store_host_acts_on_sigterm(launch, tmp_path):
    """Node rank 1 waits for node 0's store to come up: SIGTERM ends that wait at once (it used
    to go on until the read timeout, a minute, then exit 1)."""
    port = free_port()
    agent = launch(static_args(2, 1, port, extra=sh("exit 0")))
    time.sleep(1)  # it is retrying its connection (the fault's moment, not an event)
    agent.signal(signal.SIGTERM)
    sent = time.monotonic()
    assert agent.wait(10) == 128 + signal.SIGTERM, agent.output()
    assert time.monotonic() - sent < 2, agent.output()
    assert (f"received SIGTERM: interrupted while connecting to the store at 127.0.0.1:{port}"
            in agent.stderr()), agent.output()


def test_static_node_acts_on_sigterm_while_the_store_does_not_answer(launch, tmp_path):
    """Something takes the connection and never answers (a stopped store host): SIGTERM ends
    the handshake's wait at once (it waited out the read timeout and then said the store had
    refused this agent)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        agent = launch(static_args(2, 1, port, extra=sh("exit 0")))
        time.sleep(1)  # connected, waiting for the handshake's answer (the fault's moment)
        agent.signal(signal.SIGTERM)
        sent = time.monotonic()
        assert agent.wait(10) == 128 + signal.SIGTERM, agent.output()
        assert time.monotonic() - sent < 2, agent.output()
    assert (f"received SIGTERM: interrupted while waiting for the store at 127.0.0.1:{port} to "
            "answer the handshake" in agent.stderr()), agent.output()


def assert_timeout_reason(err, agents):
    assert re.search(r"round 0\b", err), outputs(agents)
    assert re.search(r"\b2\b[^\n]*joined|joined[^\n]*\b2\b", err), outputs(agents)


def agent_check(port, key):
    """Whether `key` is in the store's agents' key space (store_cli connects as an agent)."""
    r = subprocess.run([str(STORE_CLI), "127.0.0.1", str(port), "-", "agent"],
                       input=f"check {key}\n", capture_output=True, text=True, timeout=30)
    return r.stdout.strip() == "ok 1"


def test_static_timeout_reason_reaches_slow_node(launch, tmp_path):
    port = free_port()
    host = launch(static_args(3, 0, port, conf="timeout=3", extra=sh("exit 0")))
    wait_listening(port)
    other = launch(static_args(3, 1, port, conf="timeout=3", extra=sh("exit 0")))
    # Both joined round 0 (rendezvous.hpp: rdzv/<run_id>/r<N>/node/<i>; static run id "none").
    wait_for(lambda: agent_check(port, "rdzv/none/r0/node/1"), 5, what="two agents joined")
    # The other agent is slow (paused) at the moment the host closes the job.
    other.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: "round 0" in host.stderr(), 10, what="the host to close the job")
        # Give the host a bounded chance to wait for the others; it may exit at once.
        deadline = time.monotonic() + 2
        while host.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        other.signal(signal.SIGCONT)
    rcs = [host.wait(15), other.wait(15)]
    assert all(rc != 0 for rc in rcs), outputs([host, other])
    assert_timeout_reason(other.stderr(), [host, other])


# --------------------------------------------------------------------------- 3. c10d scale-up

def test_c10d_late_joiner_reforms_round(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    agents = [launch(c10d_args("2:4", 0, port, extra=sh(LOOP)), env=node_env(out, 0))]
    wait_listening(port)
    agents.append(launch(c10d_args("2:4", 1, port, extra=sh(LOOP)), env=node_env(out, 1)))
    first = wait_world(out, [0, 1], 2, 4)
    agents.append(launch(c10d_args("2:4", 2, port, extra=sh(LOOP)), env=node_env(out, 2)))
    second = wait_world(out, [0, 1, 2], 2, 6)
    # The workers of the first round were replaced.
    for key in first:
        assert first[key][0] != second[key][0], (key, first[key], second[key])
    ranks = sorted(s[3] for s in second.values())
    assert ranks == list(range(6)), second
    rcs = stop_and_wait(out, agents)
    assert rcs == [0, 0, 0], outputs(agents)
    # A membership change is not a failure restart.
    for node in range(3):
        for lr in range(2):
            assert all(s[2] == 0 for s in starts(out, node, lr)), starts(out, node, lr)
    assert len(starts(out, 0, 0)) == 2


# --------------------------------------------------------------------------- 4. non-host killed

def three_looping_agents(launch, tmp_path):
    """Three c10d agents (2:3) of looping workers, the host first; returns (out dir, agents,
    the running world once all six workers report)."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    agents = [launch(c10d_args("2:3", 0, port, extra=sh(LOOP)), env=node_env(out, 0))]
    wait_listening(port)
    for n in (1, 2):
        agents.append(launch(c10d_args("2:3", n, port, extra=sh(LOOP)), env=node_env(out, n)))
    return out, agents, wait_world(out, [0, 1, 2], 2, 6)


def test_c10d_sigkill_non_host_agent(launch, tmp_path):
    out, agents, full = three_looping_agents(launch, tmp_path)
    victims = [full[(2, lr)][0] for lr in range(2)]
    agents[2].signal(signal.SIGKILL)
    killed_at = time.monotonic()
    # The killed agent's workers die with it (parent-death signal).
    wait_for(lambda: not any(pid_alive(p) for p in victims), 5, what="the killed agent's workers")
    # Survivors notice the missing keep-alives and re-form with 2 nodes.
    after = wait_world(out, [0, 1], 2, 4, timeout=KEEP_ALIVE_LIMIT + 6)
    assert time.monotonic() - killed_at < KEEP_ALIVE_LIMIT + 6
    assert sorted(s[3] for s in after.values()) == [0, 1, 2, 3], after
    assert all(s[2] == 0 for s in after.values()), "a lost node is not a failure restart"
    rcs = stop_and_wait(out, agents[:2])
    assert rcs == [0, 0], outputs(agents)


# --------------------------------------------------------------------------- 5. host killed

def test_c10d_sigkill_store_host(launch, tmp_path):
    out, agents, full = three_looping_agents(launch, tmp_path)
    pids = [s[0] for s in full.values()]
    agents[0].signal(signal.SIGKILL)
    killed_at = time.monotonic()
    rcs = [a.wait(15) for a in agents[1:]]
    elapsed = time.monotonic() - killed_at
    assert all(rc != 0 for rc in rcs), outputs(agents)
    assert elapsed < 10, f"took {elapsed:.1f}s\n{outputs(agents)}"
    for a in agents[1:]:
        err = a.stderr()
        assert re.search(r"store[^\n]*gone", err), a.output()
        # A rendezvous failure, not "launcher_error" (attack 85).
        incident = re.search(r"incident report \(JSON\): (\S+)", err)
        assert incident, a.output()
        assert json.loads(Path(incident.group(1)).read_text())["class"] == "rendezvous", err
    wait_for(lambda: not any(pid_alive(p) for p in pids), 5, what="every worker to be gone")
    assert not (out / "stop").exists()


# --------------------------------------------------------------------------- 6. failure restart

FLAKY = r'''
echo "$NODE $LOCAL_RANK $TORCHELASTIC_RESTART_COUNT $RANK" >> "$OUTDIR/runs_${NODE}_${LOCAL_RANK}"
if [ "$NODE" = 1 ] && [ "$LOCAL_RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  # Fail only once every worker of attempt 0 has started (bounded: 10 s).
  i=0
  while [ $i -lt 200 ] && ! { [ -e "$OUTDIR/runs_0_0" ] && [ -e "$OUTDIR/runs_0_1" ] \
                               && [ -e "$OUTDIR/runs_1_0" ]; }; do
    sleep 0.05; i=$((i + 1))
  done
  exit 3
fi
exit 0
'''


def runs(out, node, lr):
    return [int(line.split()[2]) for line in read(Path(out) / f"runs_{node}_{lr}").splitlines()]


def test_worker_failure_restarts_every_node(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    agents = [launch(static_args(2, r, port, conf=FAST, extra=["--max_restarts=1", *sh(FLAKY)]),
                     env=node_env(out, r)) for r in (0, 1)]
    rcs = [a.wait(AGENT_TIMEOUT) for a in agents]
    assert rcs == [0, 0], outputs(agents)
    for node in range(2):
        for lr in range(2):
            assert runs(out, node, lr) == [0, 1], (node, lr, outputs(agents))
    # Every node says which failure it restarts after (attack 81: a node whose workers had
    # finished said only "after a failure").
    for a in agents:
        assert re.search(r"restarting the workers of every node after a failure \(round 0 ended: "
                         r"failure on node 1 \([^)]*\): rank 3 \(local_rank 1, pid \d+\) exit "
                         r"code 3\): restart 1 of 1", a.stderr()), outputs(agents)


def test_worker_failure_without_restarts_fails_every_node(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    agents = [launch(static_args(2, r, port, conf=FAST, extra=["--max_restarts=0", *sh(FLAKY)]),
                     env=node_env(out, r)) for r in (0, 1)]
    rc1 = agents[1].wait(AGENT_TIMEOUT)
    failed_at = time.monotonic()
    rc0 = agents[0].wait(AGENT_TIMEOUT)
    assert rc1 == 3, outputs(agents)
    assert "Root Cause (first observed failure)" in agents[1].stderr(), outputs(agents)
    assert rc0 == 3, outputs(agents)
    assert time.monotonic() - failed_at < 5, outputs(agents)
    for node in range(2):
        for lr in range(2):
            assert runs(out, node, lr) == [0], (node, lr, outputs(agents))


# --------------------------------------------------------------------------- 7. other job id

def test_c10d_different_rdzv_ids_do_not_join(launch, tmp_path):
    port = free_port()
    a = launch(c10d_args("2", 0, port, rdzv_id="jobA", conf="join_timeout=5", extra=sh("exit 0")))
    wait_listening(port)
    b = launch(c10d_args("2", 1, port, rdzv_id="jobB", conf="join_timeout=30", extra=sh("exit 0")))
    start = time.monotonic()
    rc_b = b.wait(15)
    # jobB learns at once that the store coordinates another job; jobA times out alone.
    assert time.monotonic() - start < 5, outputs([a, b])
    assert rc_b != 0, outputs([a, b])
    assert re.search(r'coordinates job "jobA", not "jobB".*--rdzv_id', b.stderr()), b.output()
    rc_a = a.wait(15)
    assert rc_a != 0, outputs([a, b])
    assert re.search(r"time(d)? ?out|did not complete", a.stderr()), a.output()
    for agent in (a, b):
        assert "complete: node rank" not in agent.stderr(), agent.output()


# --------------------------------------------------------------------------- 8. job token

def test_c10d_a_node_with_other_limits_is_refused(launch, tmp_path):
    """--max_restarts (or --nnodes) that differ between nodes: the later node is refused; the
    nodes would otherwise each judge failures by their own limit."""
    port = free_port()
    a = launch(c10d_args("2", 0, port, extra=["--max_restarts=0", *sh("exit 0")]))
    wait_listening(port)
    b = launch(c10d_args("2", 1, port, extra=["--max_restarts=2", *sh("exit 0")]))
    assert b.wait(AGENT_TIMEOUT) == 2, outputs([a, b])
    assert ("this node's --nnodes=2 --max_restarts=2 differ from the job's --nnodes=2 "
            "--max_restarts=0") in b.stderr(), outputs([a, b])
    a.signal(signal.SIGTERM)
    assert a.wait(AGENT_TIMEOUT) == 128 + signal.SIGTERM, outputs([a, b])


def test_c10d_wrong_token_is_refused(launch, tmp_path):
    port = free_port()
    host = launch(c10d_args("2", 0, port, conf=FAST + ",token=secret", extra=sh("exit 0")))
    wait_listening(port)
    start = time.monotonic()
    bad = launch(c10d_args("2", 1, port, conf=FAST + ",token=wrong", extra=sh("exit 0")))
    rc = bad.wait(15)
    assert rc != 0, bad.output()
    assert time.monotonic() - start < 5, bad.output()
    assert "token" in bad.stderr(), bad.output()
    assert host.proc.poll() is None, host.output()


def test_c10d_right_token_works(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    report = 'echo "$RANK $WORLD_SIZE" > "$OUTDIR/r$RANK"'
    agents = [launch(c10d_args("2", 0, port, conf=FAST + ",token=secret", extra=sh(report)),
                     env=node_env(out, 0))]
    wait_listening(port)
    agents.append(launch(c10d_args("2", 1, port, conf=FAST + ",token=secret", extra=sh(report)),
                         env=node_env(out, 1)))
    rcs = [a.wait(AGENT_TIMEOUT) for a in agents]
    assert rcs == [0, 0], outputs(agents)
    assert sorted(p.name for p in out.iterdir()) == ["r0", "r1", "r2", "r3"]
    assert all(p.read_text().split()[1] == "4" for p in out.iterdir())


def test_static_rdzv_endpoint_names_the_store(launch, tmp_path):
    """As torchrun: with the static backend, --rdzv_endpoint (when given) is where the store is."""
    port = free_port()
    common = ["--nnodes=2", f"--rdzv_endpoint=127.0.0.1:{port}", "--master_port=1",
              "--rdzv_conf=timeout=20", *sh("exit 0")]
    agents = [launch([f"--node_rank={r}", f"--local_addr=127.0.0.{r + 1}", *common])
              for r in (0, 1)]
    rcs = [a.wait(AGENT_TIMEOUT) for a in agents]
    assert rcs == [0, 0], outputs(agents)


# --------------------------------------------------------------------------- 10. one port

def session_pids(sid):
    """Every process of the session `sid` (ddprun runs in its own: start_new_session)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:  # state ppid pgrp session ...
            pids.append(int(d.name))
    return pids


def listening_ports(pids):
    """TCP ports in LISTEN state on sockets any of `pids` holds (from /proc/net/tcp{,6})."""
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
            except OSError:
                continue
            if m:
                inodes.add(m.group(1))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_one_port_per_job(launch, tmp_path, backend):
    """Workers get the rendezvous store's host and port, and while they run no process of the
    job (agents, their helpers, the workers) listens on any other port: a site that opens only
    that port in its firewall runs the job."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    report = ('echo "$MASTER_ADDR $MASTER_PORT" > "$OUTDIR/m_${NODE}_${LOCAL_RANK}"\n' + LOOP)
    args = (lambda n: static_args(2, n, port, conf=FAST, extra=sh(report))) \
        if backend == "static" else (lambda n: c10d_args("2", n, port, extra=sh(report)))
    agents = [launch(args(0), env=node_env(out, 0))]
    wait_listening(port)
    agents.append(launch(args(1), env=node_env(out, 1)))
    wait_world(out, [0, 1], 2, 4)
    listening = {n: listening_ports(session_pids(a.pid)) for n, a in enumerate(agents)}
    rcs = stop_and_wait(out, agents)
    assert rcs == [0, 0], outputs(agents)
    assert listening == {0: {port}, 1: set()}, outputs(agents)
    masters = {read(out / f"m_{n}_{lr}").strip() for n in range(2) for lr in range(2)}
    assert masters == {f"127.0.0.1 {port}"}, masters


def test_c10d_an_agent_waiting_for_the_others_says_who_joined(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    first = launch(c10d_args(2, 0, port, nproc=1, extra=sh(LOOP)), env=node_env(out, 0))
    said = wait_for(lambda: re.search(
        rf"rendezvous at 127\.0\.0\.1:{port}: waiting for round 0: 1 of at least 2 nodes joined; "
        rf"seen: \S+ \(127\.0\.0\.1\); join_timeout ends the wait in \d+ s", first.stderr()),
        timeout=15, what="the waiting agent's message")
    assert said
    second = launch(c10d_args(2, 1, port, nproc=1, extra=sh(LOOP)), env=node_env(out, 1))
    wait_world(out, [0, 1], 1, 2)
    assert stop_and_wait(out, [first, second]) == [0, 0], outputs([first, second])
    assert "waiting for round" not in second.stderr(), second.stderr()


@pytest.mark.parametrize("failing", [0, 1])
@pytest.mark.parametrize("first", [0, 1])
def test_a_node_that_cannot_start_fails_the_others_at_once(launch, tmp_path, first, failing):
    """A static node whose program is missing exits 127 before it joins; the others waited for
    it until the join timeout (attack 84). It tells the job record now, whichever node starts
    first; node rank 0, which hosts the store, serves it until the others have read it: every
    node exits 127 within seconds, naming it."""
    port = free_port()
    programs = {failing: ["/nonexistent/prog.sh"], 1 - failing: ["--no_python", "/bin/sleep", "30"]}
    agents = {}
    for rank in (first, 1 - first):
        agents[rank] = launch(static_args(2, rank, port, nproc=1, extra=programs[rank]))
        time.sleep(0.5)  # the other starts later (the order is the input)
    started = time.monotonic()
    rcs = [agents[r].wait(AGENT_TIMEOUT) for r in (0, 1)]
    assert rcs == [127, 127], outputs([agents[0], agents[1]])
    assert time.monotonic() - started < 10, outputs([agents[0], agents[1]])
    other = agents[1 - failing].stderr()
    assert f"the job failed: node {failing} (" in other, outputs([agents[0], agents[1]])
    assert "ddprun could not start there: cannot run /nonexistent/prog.sh" in other, \
        outputs([agents[0], agents[1]])


@pytest.mark.parametrize("failing_first", [True, False])
def test_a_c10d_node_that_cannot_start_fails_a_fixed_size_job_at_once(launch, tmp_path,
                                                                      failing_first):
    """The same for c10d with a fixed number of nodes (--nnodes=2): the other node waited out
    join_timeout for it. Whichever starts first hosts the store (it binds the endpoint): the
    failing one, or the one that runs. A node given no --node_rank is named by its host."""
    port = free_port()
    conf = "join_timeout=60,last_call_timeout=0.2,keep_alive_interval=0.2,keep_alive_max_attempt=5"
    def start(node, program):
        agent = launch(c10d_args(2, node, port, nproc=1, conf=conf, extra=program))
        if node == 0:
            wait_listening(port)  # the first hosts the store
        return agent

    programs = [["/nonexistent/prog.sh"], ["--no_python", "/bin/sleep", "30"]]
    if failing_first:
        failing, running = start(0, programs[0]), start(1, programs[1])
    else:
        running, failing = start(0, programs[1]), start(1, programs[0])
    started = time.monotonic()
    rcs = [failing.wait(AGENT_TIMEOUT), running.wait(AGENT_TIMEOUT)]
    assert rcs == [127, 127], outputs([failing, running])
    assert time.monotonic() - started < 10, outputs([failing, running])
    assert re.search(r"the job failed: node \S+: ddprun could not start there: cannot run "
                     r"/nonexistent/prog\.sh", running.stderr()), outputs([failing, running])


@pytest.mark.parametrize("held_for", [1.0, None])
def test_a_c10d_endpoint_port_held_by_a_socket_that_does_not_listen(tmp_path, held_for):
    """An outgoing connection given the endpoint's port (it lies in the ephemeral range) holds it
    without listening: the agent took the bind's failure for another agent hosting the store and
    waited read_timeout as its client, ending "cannot be reached ... Connection refused" (attack
    85). It binds again until the port is free; held throughout, the message names the cause."""
    port = free_port()
    with socket.create_server(("127.0.0.1", 0)) as server, socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.connect(server.getsockname())
        accepted, _ = server.accept()
        proc = subprocess.Popen(
            [str(DDPRUN), "--nnodes=1:2", "--rdzv_backend=c10d",
             f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=held",
             "--rdzv_conf=read_timeout=3,last_call_timeout=0.2", *sh('echo "ran $RANK"')],
            env=base_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if held_for is not None:
            time.sleep(held_for)
            held.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            held.close()  # reset: the port is free at once
        out, err = proc.communicate(timeout=30)
        accepted.close()
    assert f"port {port} is in use on this host but nothing listens there" in err, err
    if held_for is not None:
        assert proc.returncode == 0, err
        assert out == "ran 0\n", (out, err)
        assert "bound at last: this agent hosts the store" in err, err
    else:
        assert proc.returncode == 1, err
        assert (f"port {port} is held on this host by a socket that does not listen (an outgoing "
                "connection given that port") in err, err
        assert "ephemeral range (" in err, err


def test_a_store_never_reached_is_a_rendezvous_failure(tmp_path):
    """incident.json said "launcher_error" for a store that cannot be reached (attack 85)."""
    r = run_ddprun(["--nnodes=1:2", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{free_port()}",
                    "--rdzv_conf=is_host=0,read_timeout=1", f"--log_dir={tmp_path}",
                    *sh("true")])
    assert r.rc == 1, r
    assert "cannot be reached" in r.stderr, r
    (incident,) = tmp_path.glob("*/incident.json")
    assert json.loads(incident.read_text())["class"] == "rendezvous", r
