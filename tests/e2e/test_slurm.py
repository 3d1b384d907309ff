"""ddprun under a real Slurm (22.05) on loopback: two simulated nodes, 127.0.0.2 and 127.0.0.3,
each a slurmd of one local cluster (slurm_cluster.py), KillWait 5 s.

Every test launches `srun -N2 --ntasks-per-node=1 ... ddprun ...` (one agent per node, as Slurm
users do) or an sbatch job, and checks what a user would see: the training result, the
checkpoint files, the exit codes, each node's ddprun output (`srun -l` labels it), the job
state, and that no process of the job survives it.

1. static and c10d rendezvous with explicit flags: 4 ranks match `train --reference`.
2. scancel: every worker finishes its 2 s checkpoint, no "FAILED" report, 143.
3. scancel of workers that ignore SIGTERM (and their setsid children): after KillWait
   nothing of the job is left on any node.
4. scancel -s USR1: workers get it exactly once (from slurmstepd; ddprun sees the sender and
   does not forward a copy), ddprun does not die of it, the job ends 0; and scancel -b -s USR1
   to a batch script that execs ddprun (no job step there): ddprun forwards it, once.
4b. scontrol suspend for longer than --hang_timeout, then resume: no hang, the job ends 0.
5. a worker exits 7 on one node: srun and both agents end with 7; with --kill-on-bad-exit,
   Slurm stops node 0 first (143) and its agent exits before KillWait.
6. sbatch --requeue + scontrol requeue: the second run works and sees SLURM_RESTART_COUNT=1.
7. sbatch -t 1: at the time limit (SIGTERM twice, ~10-30 ms apart) every worker finishes
   its checkpoint. Submitted when the cluster comes up, checked last (Slurm enforces time
   limits on a 30 s tick, so the job ends 60-90 s after it starts).
8. Slurm mode: no rendezvous flags inside a step give the 4-rank reference result;
   --ntasks-per-node=2 is refused; SLURM_PROCID/LOCALID/NTASKS are rewritten per worker.

Needs root and the Slurm packages (scripts/setup.sh); without them every test skips.
"""

import re
import time
from pathlib import Path

import pytest

from conftest import DDPRUN, base_env, free_port, pid_alive, sh, wait_for
from slurm_cluster import SlurmCluster, SlurmError, environ_of, missing
from trainlib import SMALL, TRAIN, checksums, reference

WORKER = Path(__file__).resolve().parent / "programs" / "slurm_worker.py"
NODES = 2
NPROC = 2
WORLD = NODES * NPROC
STEP = ["-N", NODES, "--ntasks-per-node=1", "-c", NPROC, "-l"]  # -c: CPUs for the 2 workers
SRUN_TIMEOUT = 60
KILL_WAIT = 5
CHECKPOINT_SECONDS = 2.0  # what slurm_worker.py ckpt takes

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))


@pytest.fixture(scope="module")
def cluster():
    # 4 CPUs a node: a test's job (-c 2 on each node) runs next to the time-limit job.
    try:
        c = SlurmCluster(nodes=NODES, cpus=4, kill_wait=KILL_WAIT)
        c.start()
    except SlurmError as e:
        pytest.fail(f"the local Slurm cluster did not come up: {e}")
    yield c
    c.stop()


def job_env(cluster, **extra):
    """ddprun's test environment (conftest.base_env) with the cluster's SLURM_CONF and no
    other SLURM_* (srun exports it to the tasks)."""
    env = {k: v for k, v in base_env(**extra).items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    return env


def static_flags(port):
    return [f"--nnodes={NODES}", "--node_rank=$SLURM_NODEID", "--master_addr=127.0.0.2",
            f"--master_port={port}"]


def c10d_flags(port):
    return [f"--nnodes={NODES}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.2:{port}",
            "--rdzv_id=slurm-$SLURM_JOB_ID"]


def node_rank_task(rdzv, program, say_exit=False):
    """The task of one node: ddprun with the rendezvous flags rdzv, whose $SLURM_* bash
    expands in the step (e.g. --node_rank=$SLURM_NODEID), then program. say_exit: bash
    stays ddprun's parent and prints "agent exit <rc>" (srun -l labels it by node)."""
    flags = " ".join(f'"{a}"' for a in rdzv)
    script = (f'"$0" {flags} "$@"; rc=$?; echo "agent exit $rc"; exit $rc' if say_exit
              else f'exec "$0" {flags} "$@"')
    return ["bash", "-c", script, str(DDPRUN), f"--nproc_per_node={NPROC}", *map(str, program)]


def worker(mode, out):
    return [WORKER, mode, out]


def node_output(text, node):
    """The lines `srun -l` labelled with task (= node) `node`, label removed."""
    prefix = f"{node}: "
    return "\n".join(line[len(prefix):] for line in text.splitlines() if line.startswith(prefix))


def report(what, cluster, *texts):
    return "\n".join([what, *texts, cluster.log_tails()])


def job_id_of(cluster, name, timeout=15):
    """The id of the running job named name (srun --job-name), once all its steps run."""
    def running():
        out = cluster.squeue(["-h", "-n", name, "-t", "RUNNING", "-o", "%i"]).split()
        return int(out[0]) if out else None
    return wait_for(running, timeout, interval=0.05, what=f"job {name} running")


def wait_pids(out, ranks, timeout=20, prefix="pid"):
    """Waits for every rank's <prefix>_<rank> file (a pid and a newline); returns the pids."""
    paths = [Path(out) / f"{prefix}_{r}" for r in ranks]
    wait_for(lambda: all(p.exists() and p.read_text().endswith("\n") for p in paths), timeout,
             interval=0.05, what=f"pid files {[p.name for p in paths]} in {out}")
    return [int(p.read_text()) for p in paths]


def assert_checkpoints_complete(out, ranks, msg):
    for r in ranks:
        path = Path(out) / f"ckpt_{r}"
        assert path.exists(), f"rank {r}: no complete checkpoint {path}\n{msg}"
        lines = path.read_text().splitlines()
        assert len(lines) == 21 and lines[-1] == "complete", f"rank {r}: {lines}\n{msg}"


def assert_agents_exited_143(srun_output, msg):
    """srun's report: every node's ddprun ended with 128 + SIGTERM, none was killed."""
    for node in range(NODES):
        assert f"task {node}: Exited with exit code 143" in srun_output, msg


def sigterms(out, rank):
    path = Path(out) / f"sig_{rank}"
    text = path.read_text() if path.exists() else ""
    return [float(t) for t in re.findall(r"SIGTERM (\S+)", text)]


def out_dir(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


# --------------------------------------------------------------------------- 7. time limit
# Submitted first (autouse) so its 60-90 s run overlaps the other tests; checked last.

TIME_LIMIT_TIMEOUT = 150


@pytest.fixture(scope="module", autouse=True)
def time_limit_job(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("time_limit")
    port = free_port()
    task = node_rank_task(static_flags(port), worker("ckpt", out))
    script = out / "job.sh"
    script.write_text("#!/bin/bash\nexec srun " + " ".join(f"'{a}'" for a in
                                                         ["-n", NODES, *map(str, STEP), *task])
                      + "\n")
    job = cluster.sbatch(["-t", "1", "-N", NODES, "-n", NODES, "-c", NPROC,
                          "-o", out / "job.out", script], env=job_env(cluster))
    return job, out, time.monotonic()


# --------------------------------------------------------------------------- 1. training

@pytest.mark.parametrize("flags", [static_flags, c10d_flags], ids=["static", "c10d"])
def test_training_across_two_nodes_matches_the_reference(cluster, flags):
    env = job_env(cluster, OPENBLAS_NUM_THREADS="1")
    task = node_rank_task(flags(free_port()), [TRAIN, "--device", "cpu", *SMALL])
    r = cluster.srun([*map(str, STEP), "-K", *task], timeout=SRUN_TIMEOUT, env=env)
    msg = report(f"srun rc={r.returncode}", cluster, r.stdout, r.stderr)
    assert r.returncode == 0, msg
    sums = checksums("\n".join(node_output(r.stdout, n) for n in range(NODES)))
    assert sorted(sums) == list(range(WORLD)), msg
    assert len(set(sums.values())) == 1, sums
    assert sums[0] == pytest.approx(reference(WORLD, *SMALL), rel=1e-6), msg
    if flags is static_flags:  # node rank = SLURM_NODEID: ranks 2-3 on node 1 (c10d: join order)
        assert sorted(checksums(node_output(r.stdout, 1))) == [2, 3], msg


# --------------------------------------------------------------------------- 2-3. scancel

def launch_step(cluster, tmp_path, name, task, env=None, extra=()):
    log = tmp_path / "srun.out"
    proc = cluster.srun_background([*map(str, STEP), f"--job-name={name}", *extra, *task], log,
                                   env=env or job_env(cluster))
    return proc, log


def wait_srun(cluster, proc, log, timeout=SRUN_TIMEOUT):
    try:
        return proc.wait(timeout=timeout)
    except Exception:
        proc.kill()
        proc.wait()
        pytest.fail(report(f"srun did not end within {timeout}s", cluster, log.read_text()))


def test_scancel_lets_every_worker_finish_its_checkpoint(cluster, tmp_path):
    out = out_dir(tmp_path)
    task = node_rank_task(static_flags(free_port()), worker("ckpt", out))
    proc, log = launch_step(cluster, tmp_path, "ckpt", task)
    job = job_id_of(cluster, "ckpt")
    pids = wait_pids(out, range(WORLD))
    cluster.scancel([job])
    rc = wait_srun(cluster, proc, log)
    text = log.read_text()
    msg = report(f"srun rc={rc}", cluster, text)
    assert_checkpoints_complete(out, range(WORLD), msg)
    for node in range(NODES):
        agent = node_output(text, node)
        assert "FAILED" not in agent, msg
        assert "(SIGKILL)" not in agent, msg  # no worker killed (the plan may name it)
    assert rc == 143, msg
    assert_agents_exited_143(text, msg)
    wait_for(lambda: not any(pid_alive(p) for p in pids), 5, what="the workers to be gone")


# Ignores SIGTERM and starts a child in a session of its own that ignores it too.
IGNORE_TERM = """
trap '' TERM
setsid sh -c 'trap "" TERM; echo $$ > {out}/child_$RANK; exec sleep 300' &
echo $$ > {out}/pid_$RANK
while :; do sleep 0.1; done
"""


def test_scancel_leaves_no_process_of_the_job_on_any_node(cluster, tmp_path):
    out = out_dir(tmp_path)
    program = sh(IGNORE_TERM.format(out=out))
    task = node_rank_task(static_flags(free_port()), program)
    proc, log = launch_step(cluster, tmp_path, "ignore", task)
    job = job_id_of(cluster, "ignore")
    pids = wait_pids(out, range(WORLD))
    children = wait_pids(out, range(WORLD), prefix="child")
    job_tasks = [p for p in cluster.task_pids() if cluster_job_of(p) == str(job)]
    assert len(job_tasks) >= WORLD * 2, f"expected the job's processes, saw {job_tasks}"
    started = time.monotonic()
    cluster.scancel([job])
    rc = wait_srun(cluster, proc, log, timeout=KILL_WAIT + 20)
    msg = report(f"srun rc={rc}", cluster, log.read_text())
    leftovers = lambda: [p for p in pids + children + job_tasks if pid_alive(p)]  # noqa: E731
    wait_for(lambda: not leftovers(), 5, what=f"every process of job {job} to be gone")
    # Gone by Slurm's KillWait, not after ddprun's 30 s grace (--shutdown_timeout's default):
    # KillWait, then srun's own wait of up to 7 s for the step, on a loaded 2-core host (CI
    # once took longer than KILL_WAIT + 10, every process gone).
    assert time.monotonic() - started < KILL_WAIT + 20, msg
    assert not [p for p in cluster.task_pids() if cluster_job_of(p) == str(job)], msg


def cluster_job_of(pid):
    return environ_of(pid).get("SLURM_JOB_ID")


# --------------------------------------------------------------------------- 4. USR1

def test_scancel_usr1_reaches_the_workers_and_the_job_goes_on(cluster, tmp_path):
    out = out_dir(tmp_path)
    task = node_rank_task(static_flags(free_port()), worker("usr1", out))
    proc, log = launch_step(cluster, tmp_path, "usr1", task)
    job = job_id_of(cluster, "usr1")
    wait_pids(out, range(WORLD))
    cluster.scancel(["-s", "USR1", job])
    rc = wait_srun(cluster, proc, log)
    msg = report(f"srun rc={rc}", cluster, log.read_text())
    assert rc == 0, msg
    # Exactly once: slurmstepd signals every process of the step (proctrack/linuxproc), so
    # ddprun, seeing the sender is the step's slurmstepd, does not forward a second copy.
    for r in range(WORLD):
        assert (out / f"sig_{r}").read_text().count("SIGUSR1") == 1, msg
    assert "does not send them a second copy" in log.read_text(), msg


def test_usr1_to_the_batch_shell_running_ddprun_reaches_the_workers(cluster, tmp_path):
    """`sbatch --signal=B:USR1@T` / `scancel -b -s USR1`, with a batch script that execs
    ddprun on one node: only the batch shell, i.e. ddprun, gets the signal."""
    out = out_dir(tmp_path)
    command = " ".join([str(DDPRUN), f"--nproc_per_node={NPROC}", *map(str, worker("usr1", out))])
    job = cluster.sbatch(["-N", 1, "-n", 1, "-c", NPROC, "-o", tmp_path / "job.out",
                          "--wrap", "exec " + command], env=job_env(cluster))
    wait_pids(out, range(NPROC))
    cluster.scancel(["-b", "-s", "USR1", job])
    info = cluster.wait_job(job, lambda j: j["JobState"] not in ("PENDING", "RUNNING",
                                                                 "COMPLETING"), 30)
    msg = report(f"job {info}", cluster, (tmp_path / "job.out").read_text())
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), msg
    # Exactly once, from ddprun (Slurm signalled the batch shell only).
    for r in range(NPROC):
        assert (out / f"sig_{r}").read_text().count("SIGUSR1") == 1, msg


# --------------------------------------------------------------------------- 4b. suspend

def test_scontrol_suspend_and_resume_is_no_hang(cluster, tmp_path):
    """scontrol suspend stops every process of the job (SIGTSTP, then SIGSTOP) for longer than
    --hang_timeout; resumed, ddprun left that time out (it took the workers for hung, 124)."""
    out = out_dir(tmp_path)
    beat = sh('echo $$ > {out}/pid_$RANK.tmp; mv {out}/pid_$RANK.tmp {out}/pid_$RANK; i=0; '
              'while [ $i -lt 30 ]; do touch "$DDPRUN_HEARTBEAT_FILE"; sleep 0.2; '
              'i=$((i+1)); done; echo "rank $RANK done"'.format(out=out))
    task = node_rank_task([*static_flags(free_port()), "--hang_timeout=2"], beat)
    proc, log = launch_step(cluster, tmp_path, "suspend", task)
    job = job_id_of(cluster, "suspend")
    wait_pids(out, range(WORLD))
    cluster.scontrol(["suspend", str(job)])
    cluster.wait_job_state(job, ["SUSPENDED"], 15)
    time.sleep(5)
    cluster.scontrol(["resume", str(job)])
    rc = wait_srun(cluster, proc, log)
    text = log.read_text()
    msg = report(f"srun rc={rc}", cluster, text)
    assert rc == 0, msg
    assert "hung" not in text, msg
    for r in range(WORLD):
        assert f"rank {r} done" in text, msg
    for node in range(NODES):
        assert "ddprun itself did not run for" in node_output(text, node), msg


# --------------------------------------------------------------------------- 5. exit 7

def test_a_worker_exiting_7_on_one_node_ends_both_agents_with_7(cluster, tmp_path):
    """No --kill-on-bad-exit: Slurm would race ddprun to stop node 0 (SIGTERM, 143). Here
    only ddprun can end node 0's workers (they sleep 60 s), and srun waits for both agents."""
    out = out_dir(tmp_path)
    task = node_rank_task(static_flags(free_port()), worker("fail", out), say_exit=True)
    start = time.monotonic()
    r = cluster.srun([*map(str, STEP), *task], timeout=SRUN_TIMEOUT, env=job_env(cluster))
    elapsed = time.monotonic() - start
    msg = report(f"srun rc={r.returncode} after {elapsed:.1f}s", cluster, r.stdout, r.stderr)
    assert r.returncode == 7, msg
    for node in range(NODES):
        assert "agent exit 7" in node_output(r.stdout, node), msg
    failed = node_output(r.stderr, 1)
    assert "Root Cause (first observed failure)" in failed, msg
    assert re.search(r"exitcode\s*: 7\b", failed), msg
    assert elapsed < 20, msg  # far below the workers' 60 s sleep and ddprun's 30 s grace


def test_kill_on_bad_exit_stops_the_other_agent_within_kill_wait(cluster, tmp_path):
    """With --kill-on-bad-exit Slurm SIGTERMs node 0 as soon as node 1's agent exits 7,
    before ddprun's own news of the failure lands: srun reports 143 (its highest task exit
    code), node 1's agent 7, and node 0's agent stops its workers and exits 143 itself,
    well before Slurm's SIGKILL at KillWait."""
    out = out_dir(tmp_path)
    task = node_rank_task(static_flags(free_port()), worker("fail", out))
    start = time.monotonic()
    r = cluster.srun([*map(str, STEP), "--kill-on-bad-exit=1", *task], timeout=SRUN_TIMEOUT,
                     env=job_env(cluster))
    elapsed = time.monotonic() - start
    text = r.stdout + r.stderr
    msg = report(f"srun rc={r.returncode} after {elapsed:.1f}s", cluster, r.stdout, r.stderr)
    assert "task 1: Exited with exit code 7" in text, msg
    assert re.search(r"task 0: Exited with exit code (7|143)\b", text), msg
    assert r.returncode in (7, 143), msg
    assert elapsed < KILL_WAIT, msg


# --------------------------------------------------------------------------- 6. requeue

def test_requeued_job_runs_ddprun_again(cluster, tmp_path):
    out = out_dir(tmp_path)
    task = node_rank_task(static_flags(free_port()), worker("restart", out))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho restart count $SLURM_RESTART_COUNT\nexec srun "
                      + " ".join(f"'{a}'" for a in ["-n", NODES, *map(str, STEP), *task]) + "\n")
    job = cluster.sbatch(["--requeue", "-N", NODES, "-n", NODES, "-c", NPROC,
                          "-o", tmp_path / "job.out", "--open-mode=append", script],
                         env=job_env(cluster))
    first = wait_pids(out, range(WORLD))
    for p in Path(out).glob("pid_*"):
        p.unlink()
    cluster.scontrol(["requeue", job])
    # A requeued job is held back 2 minutes (BeginTime); let it start now.
    cluster.wait_job_state(job, "PENDING", 20)
    # slurmd revoked the first run's credential, and refuses one signed in that second or before
    # ("Killing non-startable batch JobId=N: Job credential revoked": the job FAILED, once in CI).
    # Slurm's 2-minute hold exists for this; two seconds are enough.
    time.sleep(2)
    cluster.scontrol(["update", f"JobId={job}", "StartTime=now"])
    info = cluster.wait_job(job, lambda j: j.get("Restarts") == "1" and j["JobState"] in (
        "COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"), 60, what="the second run to end")
    text = (tmp_path / "job.out").read_text()
    msg = report(f"job {info}", cluster, text)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", msg
    second = wait_pids(out, range(WORLD), timeout=1)
    assert set(first).isdisjoint(second), msg
    assert "restart count 1" in text, msg
    assert not any(pid_alive(p) for p in first), msg


# --------------------------------------------------------------------------- 8. Slurm mode


def test_slurm_mode_without_rendezvous_flags_matches_the_reference(cluster):
    env = job_env(cluster, OPENBLAS_NUM_THREADS="1")
    r = cluster.srun([*map(str, STEP), "-K", DDPRUN, f"--nproc_per_node={NPROC}", TRAIN,
                      "--device", "cpu", *SMALL], timeout=SRUN_TIMEOUT, env=env)
    msg = report(f"srun rc={r.returncode}", cluster, r.stdout, r.stderr)
    assert r.returncode == 0, msg
    sums = checksums(r.stdout)
    assert sorted(sums) == list(range(WORLD)), msg
    assert len(set(sums.values())) == 1, sums
    assert sums[0] == pytest.approx(reference(WORLD, *SMALL), rel=1e-6), msg


def test_slurm_mode_refuses_two_tasks_per_node(cluster, tmp_path):
    out = out_dir(tmp_path)
    r = cluster.srun(["-N", 1, "--ntasks-per-node=2", "-l", "-K", DDPRUN, "--nproc_per_node=1",
                      *worker("env", out)], timeout=SRUN_TIMEOUT, env=job_env(cluster))
    msg = report(f"srun rc={r.returncode}", cluster, r.stdout, r.stderr)
    assert r.returncode != 0, msg
    assert "--ntasks-per-node=1" in r.stderr, msg
    assert not list(out.glob("env_*")), "no worker may start\n" + msg


def test_workers_see_their_own_slurm_task_variables(cluster, tmp_path):
    out = out_dir(tmp_path)
    task = node_rank_task(static_flags(free_port()), worker("env", out))
    r = cluster.srun([*map(str, STEP), "-K", *task], timeout=SRUN_TIMEOUT, env=job_env(cluster))
    msg = report(f"srun rc={r.returncode}", cluster, r.stdout, r.stderr)
    assert r.returncode == 0, msg
    for rank in range(WORLD):
        fields = (out / f"env_{rank}").read_text().split()
        procid, localid, ntasks, rank_env, local_rank, world = fields
        assert (rank_env, world) == (str(rank), str(WORLD)), fields
        assert (procid, localid, ntasks) == (str(rank), local_rank, str(WORLD)), \
            f"rank {rank}: SLURM_PROCID SLURM_LOCALID SLURM_NTASKS = {procid} {localid} {ntasks}"
    # slurmstepd starts the task with no signal ignored: ddprun handles srun's SIGINT and scancel's.
    assert "was ignored when ddprun started" not in r.stderr + r.stdout, msg


# --------------------------------------------------------------------------- 7. time limit (end)

def test_time_limit_lets_every_worker_finish_its_checkpoint(cluster, time_limit_job):
    job, out, submitted = time_limit_job
    left = TIME_LIMIT_TIMEOUT - (time.monotonic() - submitted)
    info = cluster.wait_job(job, lambda j: j["JobState"] not in ("PENDING", "RUNNING",
                                                                 "COMPLETING"),
                            max(left, 5), what="the time limit")
    text = (out / "job.out").read_text()
    msg = report(f"job {info}", cluster, text)
    assert info["JobState"] == "TIMEOUT", msg
    assert_checkpoints_complete(out, range(WORLD), msg)
    for node in range(NODES):
        agent = node_output(text, node)
        assert "FAILED" not in agent, msg
        assert "(SIGKILL)" not in agent, msg  # no worker killed (the plan may name it)
    assert_agents_exited_143(text, msg)
    # The scenario of issue 10: each worker saw the SIGTERM burst of slurmstepd.
    for r in range(WORLD):
        assert sigterms(out, r), f"rank {r} saw no SIGTERM\n{msg}"
