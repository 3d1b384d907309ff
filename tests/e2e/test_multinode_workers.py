"""What the workers of a multi-node job meet (two agents on loopback): PyTorch's process groups
across a restart, the store's keys of an earlier round, and a hang whose cause is on the other
node. test_multinode.py has the rendezvous itself."""
import json
import os
import re
import signal
import time

import pytest

from conftest import PYTHON, free_port, sh, wait_for, write_script
from test_limits import pids_cgroup_root
from test_multinode import FAST, node_env, outputs, static_args
from trainlib import TRAIN

ALLREDUCE = r'''
import os
import torch
import torch.distributed as dist

out = os.environ["OUTDIR"]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
world = dist.get_world_size()
fd = os.open(os.path.join(out, f"r{rank}_a{attempt}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.write(fd, f"{rank} {attempt} {world} {t.item()}\n".encode())
os.close(fd)
os.write(1, f"rank {rank} attempt {attempt} sum {t.item()}\n".encode())
if attempt == 0 and rank == 3:
    # Fail only once every rank has its sum: exiting at once raced the peers still reading
    # the collective's last bytes ("Connection reset by peer" on rank 1, once in CI).
    import time
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(out, f"r{r}_a0")) for r in range(world)):
        time.sleep(0.05)
    os._exit(1)
dist.destroy_process_group()
'''


def run_pytorch_job_with_a_restart(launch, tmp_path, name, text):
    """Two static agents, 2 PyTorch workers each, run the script `text` with --max_restarts=1;
    both must exit 0. Returns the workers' output directory, the agents and the store's port."""
    pytest.importorskip("torch.distributed")
    out = tmp_path / "out"
    out.mkdir()
    script = write_script(tmp_path, name, text, executable=False)
    port = free_port()
    agents = [launch(static_args(2, r, port, conf=FAST, extra=["--max_restarts=1", str(script)]),
                     env=node_env(out, r, GLOO_SOCKET_IFNAME="lo", PYTHON_EXEC=PYTHON))
              for r in (0, 1)]
    rcs = [a.wait(90) for a in agents]
    assert rcs == [0, 0], outputs(agents)
    return out, agents, port


def test_pytorch_gloo_allreduce_across_restart(launch, tmp_path):
    out, agents, _ = run_pytorch_job_with_a_restart(launch, tmp_path, "allreduce.py", ALLREDUCE)
    for attempt in (0, 1):
        for rank in range(4):
            f = out / f"r{rank}_a{attempt}"
            assert f.exists(), f"{f.name} missing\n{outputs(agents)}"
            r, a, world, total = f.read_text().split()
            assert (int(r), int(a), int(world)) == (rank, attempt, 4)
            assert float(total) == 10.0, f"{f.name}: {total}"


ROUNDS = r"""
import datetime, json, os
import torch
import torch.distributed as dist

out = os.environ["OUTDIR"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                      timeout=datetime.timedelta(seconds=30))
probe = [f"attempt0/rank{r}" for r in range(world)] + ["rdzv/none/job", "rdzv/hosted_run_id"]
seen = [k for k in probe if store.check([k])]
store.set(f"attempt{attempt}/rank{rank}", "here")
store.wait([f"attempt{attempt}/rank{r}" for r in range(world)])
total = None
if attempt == 1:
    dist.init_process_group("gloo", init_method="env://")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    total = t.item()
    dist.destroy_process_group()
report = {"addr": os.environ["MASTER_ADDR"], "port": int(os.environ["MASTER_PORT"]),
          "seen": seen, "total": total}
with open(os.path.join(out, f"r{rank}_a{attempt}.json"), "w") as f:
    json.dump(report, f)
store.set(f"attempt{attempt}/written{rank}", "yes")
if attempt == 0 and rank == world - 1:
    # Fail only once every rank has written its report: exiting as soon as the keys were all
    # there raced rank 2 still writing it, which the failure's SIGTERM then stopped (once in CI).
    store.wait([f"attempt0/written{r}" for r in range(world)])
    os._exit(1)  # every rank of attempt 0 has written its key: the restart must drop them
"""


def test_restart_round_sees_no_key_of_the_earlier_round(launch, tmp_path):
    """Attempt 0's workers write keys, then one fails; attempt 1's workers, on the same port, see
    none of them and none of the rendezvous keys, and a gloo process group forms there."""
    out, agents, port = run_pytorch_job_with_a_restart(launch, tmp_path, "rounds.py", ROUNDS)
    for attempt in (0, 1):
        for rank in range(4):
            f = out / f"r{rank}_a{attempt}.json"
            assert f.exists(), f"{f.name} missing\n{outputs(agents)}"
            r = json.loads(f.read_text())
            assert (r["addr"], r["port"]) == ("127.0.0.1", port), r
            assert not any(k.startswith("rdzv/") for k in r["seen"]), r
            if attempt == 1:
                assert r["seen"] == [], f"attempt 1 saw attempt 0's keys: {r}"
                assert r["total"] == 10.0, r


def test_a_hang_is_blamed_on_the_node_whose_rank_stalled_not_on_the_one_waiting(launch, tmp_path):
    """Node 1's rank stops between collectives; node 0's waits inside the all-reduce for it.
    Each agent sees its half, and whichever recorded its hang first was the root cause: node 0's
    waiting rank in about 1 run of 3 (found by an attacking helper). A node whose ranks all wait
    inside a collective now gives the other node's agent the peer settle time to go first."""
    for attempt in range(3):
        port = free_port()
        args = ["--hang_timeout=4", TRAIN, "--device", "cpu", "--width", "32", "--depth", "1",
                "--steps", "200", "--hang-at-step", "5", "--hang-rank", "1"]
        agents = [launch(static_args(2, r, port, nproc=1, extra=args), env=node_env(tmp_path, r))
                  for r in (1, 0)]
        rcs = [a.wait(60) for a in agents]
        assert rcs == [124, 124], outputs(agents)
        for agent in agents:
            assert "the job failed: node 1 (" in agent.stderr(), f"run {attempt}\n" + outputs(agents)
            assert "): rank 1 (local_rank 0, pid " in agent.stderr(), outputs(agents)


FAILS_DURING_A_LONG_GRACE = r"""
import os, signal, sys, time
rank, out = int(os.environ["RANK"]), os.environ["OUTDIR"]
def stopped(signum, frame):
    with open(f"{out}/stopped_{rank}", "w") as f:
        f.write(repr(time.time()))
    sys.exit(143)
if rank == 2:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a rank stuck in a collective
else:
    signal.signal(signal.SIGTERM, stopped)
time.sleep(2)
if rank == 3:
    with open(f"{out}/failed", "w") as f:
        f.write(repr(time.time()))
    sys.exit(7)
if rank in (0, 1):  # node 0's ranks lose their peer 3 s after rank 3 died, unless stopped
    time.sleep(3)
    raise RuntimeError("[gloo/transport/tcp/pair.cc:534] Read error: Connection reset by peer")
time.sleep(60)
"""


def test_a_failure_reaches_the_other_nodes_before_its_nodes_grace_ends(launch, tmp_path):
    """Node 1's rank 3 exits 7 while its rank 2 ignores SIGTERM (10 s of grace). Node 1 told the
    job record only after its grace: node 0's ranks ran on, failed of the lost peer, and became
    the root cause (exit 1), or node 0 lost node 1 first (attack 81). The failure is recorded as
    node 1's grace begins: node 0 stops its workers at once, and every agent exits 7."""
    script = write_script(tmp_path, "job.py", FAILS_DURING_A_LONG_GRACE, executable=False)
    port = free_port()
    agents = [launch(static_args(2, r, port, conf=FAST,
                                 extra=["--shutdown_timeout=10", "--max_restarts=0", str(script)]),
                     env=node_env(tmp_path, r)) for r in (0, 1)]
    rcs = [a.wait(60) for a in agents]
    assert rcs == [7, 7], outputs(agents)
    for agent in agents:
        assert "the job failed: node 1 (" in agent.stderr(), outputs(agents)
        assert "): rank 3 (local_rank 1, pid " in agent.stderr(), outputs(agents)
    failed = float((tmp_path / "failed").read_text())
    for rank in (0, 1):
        stopped = float((tmp_path / f"stopped_{rank}").read_text())
        assert stopped - failed < 2.5, f"rank {rank} stopped {stopped - failed:.1f} s after " \
            f"rank 3 failed\n{outputs(agents)}"


# Node 1's workers ignore SIGTERM (they take the whole --shutdown_timeout, one process each);
# node 0's write when they were stopped.
SLEEPS_THROUGH_TERM = r'''
if [ "$GROUP_RANK" = 1 ]; then trap "" TERM; exec sleep 60; fi
trap 'date +%s.%N > "$OUTDIR/stopped_$RANK"; exit 143' TERM
sleep 60 &
wait
'''


def test_a_worker_that_cannot_start_reaches_the_other_nodes_before_its_nodes_grace_ends(
        launch, tmp_path):
    """Node 1 (in a pids cgroup of pids.max 20) starts some of its 24 workers, then fork fails
    with EAGAIN; the started ones ignore SIGTERM (15 s of grace). A worker that could not start
    was told to the job record only after that grace (the early record took exits only): node 0
    waited 15 s. Now node 0 stops its workers at once and exits 1 naming the start failure."""
    root = pids_cgroup_root()
    if root is None:
        pytest.skip("needs root and a writable pids cgroup (v1 hierarchy, or v2 with pids)")
    cg = root / f"ddprun_test_{os.getpid()}_start"
    cg.mkdir()
    try:
        (cg / "pids.max").write_text("20\n")
        port = free_port()
        args = ["--shutdown_timeout=15", "--max_restarts=0", *sh(SLEEPS_THROUGH_TERM)]
        node1 = launch(static_args(2, 1, port, nproc=24, conf=FAST, extra=args),
                       env=node_env(tmp_path, 1))
        # Moved before node 0 exists: no worker starts before the rendezvous.
        (cg / "cgroup.procs").write_text(str(node1.proc.pid))
        started = time.time()
        node0 = launch(static_args(2, 0, port, nproc=24, conf=FAST, extra=args),
                       env=node_env(tmp_path, 0))
        assert node0.wait(60) == 1, outputs([node0, node1])
        assert node1.wait(60) == 1, outputs([node0, node1])
        assert "could not be started: start /bin/sh: fork failed with EAGAIN" in \
            node0.stderr(), outputs([node0, node1])
        stops = [float(p.read_text()) - started for p in tmp_path.glob("stopped_*")]
        assert len(stops) == 24, outputs([node0, node1])
        assert max(stops) < 10, f"node 0's workers stopped {min(stops):.1f}-{max(stops):.1f} s " \
            f"after its start (node 1's grace is 15 s)\n{outputs([node0, node1])}"
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        wait_for(lambda: not (cg / "cgroup.procs").read_text().split(), 10,
                 what="the cgroup's processes gone")
        cg.rmdir()


def train_of(agent):
    """The pid of the agent's one worker, the trainer (its child named train)."""
    def found():
        pid = agent.proc.pid
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            for child in f.read().split():
                try:
                    with open(f"/proc/{child}/comm") as c:
                        if c.read().strip() == "train":
                            return int(child)
                except FileNotFoundError:
                    pass
        return None
    return wait_for(found, timeout=30, what=f"the trainer of ddprun {agent.proc.pid}")


def test_a_rank_stopped_on_one_node_pauses_the_hang_limits_of_every_node(launch, tmp_path):
    """Node 1's rank is stopped (SIGSTOP: a debugger, a user) for 3 times --hang_timeout; node
    0's rank waits for it inside the all-reduce. Only node 1's ddprun saw the stop: node 0
    declared its rank hung and the job ended with 124 (attack 109). Node 1 now tells node 0
    through the store, which says so and leaves the time out; the job finishes."""
    port = free_port()
    args = ["--hang_timeout=2", TRAIN, "--device", "cpu", "--width", "32", "--depth", "1",
            "--steps", "20000"]
    agents = [launch(static_args(2, r, port, nproc=1, conf=FAST, extra=args),
                     env=node_env(tmp_path, r)) for r in (0, 1)]
    worker = train_of(agents[1])
    time.sleep(1)
    os.kill(worker, signal.SIGSTOP)
    time.sleep(6)
    os.kill(worker, signal.SIGCONT)
    rcs = [a.wait(120) for a in agents]
    assert rcs == [0, 0], outputs(agents)
    err = agents[0].stderr()
    assert re.search(rf"rank 1 \(local_rank 0, pid {worker}\) on node 1 \([^)]*\) is stopped by "
                     rf"a signal \(SIGSTOP\) \(kill -CONT {worker} there continues it\): the job "
                     r"waits for it", err), outputs(agents)
    assert re.search(rf"rank 1 \(local_rank 0, pid {worker}\) on node 1 \([^)]*\) runs again "
                     r"after [0-9.]+ s; the hang limits count again", err), outputs(agents)
    assert "hung" not in err, outputs(agents)


def test_a_collective_timeout_while_a_rank_of_another_node_is_stopped_names_it(launch, tmp_path):
    """Node 1's rank is stopped past node 0's collective timeout: node 0's rank fails (that is
    the collective timeout's contract) and its report blamed no one, or a victim. It now says
    the stopped rank of node 1 held it."""
    port = free_port()
    args = ["--max_restarts=0", TRAIN, "--device", "cpu", "--width", "32", "--depth", "1",
            "--steps", "200000", "--collective-timeout", "2"]
    agents = [launch(static_args(2, r, port, nproc=1, conf=FAST, extra=args),
                     env=node_env(tmp_path, r)) for r in (0, 1)]
    worker = train_of(agents[1])
    time.sleep(1)
    os.kill(worker, signal.SIGSTOP)
    assert agents[0].wait(60) != 0, outputs(agents)
    agents[1].wait(60)
    err = agents[0].stderr()
    assert re.search(r"while rank 1 on node 1 \([^)]*\) was stopped by a signal \(SIGSTOP\): the "
                     r"stopped rank held", err), outputs(agents)
