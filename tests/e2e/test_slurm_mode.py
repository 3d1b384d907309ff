"""Slurm mode without a Slurm: ddprun run with the SLURM_* variables slurmstepd gives each task
of a step (shared/reference/slurm.md, 3b), two "nodes" on this host. What a real Slurm adds
(srun, scancel, KillWait, requeue) is tested in test_slurm.py; this file checks ddprun's
decisions fast and everywhere: the rendezvous taken from the step, the refusals, the workers'
SLURM_* and the report. Also the static backend's duplicate node rank, which needs no Slurm."""
import json
import re
import socket
import time

from conftest import PYTHON, base_env, free_port, run_ddprun, sh, write_script
from trainlib import SMALL, TRAIN, checksums, reference


def step_env(node, nodes=2, per_node=1, job="4242", **extra):
    """The environment of task `node` of `srun -N<nodes> --ntasks-per-node=<per_node>`."""
    env = base_env(
        SLURM_STEP_ID="0", SLURM_JOB_ID=job, SLURM_JOBID=job,
        SLURM_STEP_NUM_NODES=str(nodes), SLURM_NNODES=str(nodes),
        SLURM_STEP_NUM_TASKS=str(nodes * per_node), SLURM_NTASKS=str(nodes * per_node),
        SLURM_STEP_TASKS_PER_NODE=f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
        SLURM_STEP_NODELIST=f"127.0.0.[1-{nodes}]", SLURM_NODEID=str(node),
        SLURM_PROCID=str(node * per_node), SLURM_LOCALID="0",
        SLURMD_NODENAME=f"sim{node}")
    env.update(extra)
    return env


def run_nodes(launch, args, envs):
    procs = [launch(args, env=e) for e in envs]
    return [(p.wait(60), p) for p in procs]


def test_two_node_step_without_rendezvous_flags_matches_the_reference(launch):
    """`srun -N2 ddprun --nproc_per_node=2 train`: one 4-rank job, not two 2-rank ones."""
    args = ["--nproc_per_node=2", TRAIN, *SMALL]
    results = run_nodes(launch, args, [step_env(0), step_env(1)])
    for rc, p in results:
        assert rc == 0, p.output()
    out = "".join(p.stdout() for _, p in results)
    got = checksums(out)
    assert sorted(got) == [0, 1, 2, 3], out
    ref = reference(4, *SMALL)
    assert all(abs(c - ref) <= 1e-5 * abs(ref) for c in got.values()), (got, ref)
    said = results[1][1].stderr()
    assert "Slurm step 4242.0, node 1 of 2 (127.0.0.[1-2]): --nnodes=2 --node_rank=1" in said
    assert "--master_addr=127.0.0.1" in said and "--rdzv_id=4242.0" in said


def seen_in(out_dir):
    return [json.loads(p.read_text()) for p in sorted(out_dir.iterdir())]


def test_workers_get_their_own_slurm_variables(launch, tmp_path):
    show = write_script(tmp_path, "show.py", """
import json, os, sys
keys = ["RANK", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK"]
with open(os.path.join(sys.argv[1], os.environ["RANK"] + "-" + os.environ["SLURM_PROCID"]), "w") as f:
    json.dump({k: os.environ.get(k) for k in keys}, f)
""", executable=False)

    out = tmp_path / "env"
    out.mkdir()
    results = run_nodes(launch, ["--nproc_per_node=2", show, out],
                        [step_env(n, SLURM_CPUS_PER_TASK="5") for n in (0, 1)])
    for rc, p in results:
        assert rc == 0, p.output()
    seen = seen_in(out)
    assert len(seen) == 4
    for e in seen:
        rank = int(e["RANK"])
        assert e["SLURM_PROCID"] == str(rank)
        assert e["SLURM_LOCALID"] == str(rank % 2)
        assert e["SLURM_NODEID"] == str(rank // 2)
        assert e["SLURM_NTASKS"] == "4"
        assert e["SLURM_NTASKS_PER_NODE"] == "2"
        assert e["SLURM_TASKS_PER_NODE"] == "2(x2)"
        assert e["SLURM_JOB_ID"] == "4242"
        # srun -c5 for the agent: each of its 2 workers gets 2, as srun -n2 -c2 would give.
        assert e["SLURM_CPUS_PER_TASK"] == "2"
    # --slurm=off: the agent's task variables pass through untouched.
    off = tmp_path / "off"
    off.mkdir()
    r = run_ddprun(["--slurm=off", "--nproc_per_node=2", show, off], env=step_env(0, nodes=1))
    assert r.rc == 0, r
    assert [e["SLURM_PROCID"] for e in seen_in(off)] == ["0", "0"]

    # A batch script that runs ddprun itself (no step): the batch's own task variables gave
    # every worker SLURM_PROCID 0 (attack 84); rewritten as in a step now, unless --slurm=off.
    batch = base_env(SLURM_JOB_ID="77", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
                     SLURM_NTASKS="1", SLURM_CPUS_PER_TASK="4", SLURM_NNODES="1")
    for flag, procids in (([], ["0", "1"]), (["--slurm=off"], ["0", "0"])):
        where = tmp_path / ("batch" + "".join(flag))
        where.mkdir()
        r = run_ddprun([*flag, "--nproc_per_node=2", show, where], env=batch)
        assert r.rc == 0, r
        seen = seen_in(where)
        assert [e["SLURM_PROCID"] for e in seen] == procids, seen
        if not flag:
            assert [(e["SLURM_NTASKS"], e["SLURM_CPUS_PER_TASK"]) for e in seen] == \
                [("2", "2"), ("2", "2")], seen


def test_several_agents_per_node_are_refused_with_the_fix():
    r = run_ddprun(["--nproc_per_node=2", "/bin/true"], env=step_env(0, per_node=4))
    assert r.rc == 2, r
    assert "8 ddprun agents on 2 node(s)" in r.stderr
    assert "--ntasks-per-node=1" in r.stderr


def test_nnodes_one_on_a_multi_node_step_is_refused():
    r = run_ddprun(["--nnodes=1", "/bin/true"], env=step_env(1))
    assert r.rc == 2, r
    assert "every node would run a 1-node job of its own" in r.stderr


def test_one_step_per_node_with_the_rendezvous_given_forms_one_job(launch):
    """`srun -N1 -w nodeK ddprun --nnodes=2 --node_rank=K --master_addr=...` once per node (or a
    het job's components) runs under torchrun; ddprun refused it, saying the job "would wait for
    nodes that never come" (found by an attacking helper)."""
    port = free_port()
    args = ["--nnodes=2", "--master_addr=127.0.0.1", f"--master_port={port}",
            "--nproc_per_node=2", TRAIN, *SMALL]
    procs = [launch([f"--node_rank={n}", *args], env=step_env(0, nodes=1, job=f"77{n}"))
             for n in (0, 1)]
    results = [(p.wait(60), p) for p in procs]
    for rc, p in results:
        assert rc == 0, p.output()
        assert "the job's other nodes come from other steps" in p.stderr(), p.output()
    got = checksums("".join(p.stdout() for _, p in results))
    assert sorted(got) == [0, 1, 2, 3], got
    assert len(set(got.values())) == 1, got
    # Without --node_rank the step cannot say which node this is: refused, naming what to give.
    r = run_ddprun(["--nnodes=2", "/bin/true"], env=step_env(0, nodes=1))
    assert r.rc == 2, r
    assert "give --node_rank and --master_addr, or drop --nnodes and run srun -N2" in r.stderr, r


def test_a_node_past_an_elastic_maximum_waits_and_exits_0(launch):
    """`srun -N3 ddprun --rdzv_backend=c10d --nnodes=1:2`: the third node exited 2 with "invalid
    --node_rank=2", an option the user never gave (taken from SLURM_NODEID), failing a step whose
    job succeeded (attack 95). It waits to join with no node rank of its own, as off Slurm."""
    port = free_port()
    args = ["--rdzv_backend=c10d", "--nnodes=1:2", f"--rdzv_endpoint=127.0.0.1:{port}",
            "--nproc_per_node=1", TRAIN, *SMALL]
    results = run_nodes(launch, args, [step_env(n, nodes=3) for n in range(3)])
    for rc, p in results:
        assert rc == 0, p.output()
        assert "invalid --node_rank" not in p.stderr(), p.output()
    assert "the job leaves the nodes beyond the maximum waiting" in results[2][1].stderr()
    assert sum("the job succeeded while this agent waited to join" in p.stderr()
               for _, p in results) == 1, [p.output() for _, p in results]
    got = checksums("".join(p.stdout() for _, p in results))
    assert sorted(got) == [0, 1], got


def test_standalone_on_a_multi_node_step_is_refused_without_a_fix_that_fails():
    r = run_ddprun(["--standalone", "/bin/true"], env=step_env(1))
    assert r.rc == 2, r
    assert "--standalone is a single-node job, but this Slurm step has 2 nodes" in r.stderr, r
    assert "--nnodes=1" not in r.stderr, r


def test_slurm_node_outside_a_step_is_refused():
    r = run_ddprun(["--slurm=node", "/bin/true"])
    assert r.rc == 2, r
    assert "not a Slurm job step" in r.stderr


def test_the_report_and_log_dir_name_the_slurm_node(launch, tmp_path):
    logs = tmp_path / "logs"
    script = "if [ \"$RANK\" = 3 ]; then exit 7; fi; sleep 20"
    envs = [step_env(n, SLURM_RESTART_COUNT="2") for n in (0, 1)]
    results = run_nodes(launch, ["--nproc_per_node=2", f"--log_dir={logs}", *sh(script)], envs)
    assert [rc for rc, _ in results] == [7, 7], [p.output() for _, p in results]
    report = results[1][1].stderr()
    assert "FAILED" in report
    assert re.search(r"host\s*: \S+ \(Slurm node sim1, node rank 1; job step 4242\.0, "
                     r"requeued 2 time\(s\): SLURM_RESTART_COUNT\)", report), report
    dirs = sorted(p.name for p in logs.iterdir())
    assert len(dirs) == 2 and dirs[0].startswith("4242.0_node0-sim0_") \
        and dirs[1].startswith("4242.0_node1-sim1_"), dirs


def test_a_static_node_rank_claimed_twice_fails_the_job_within_seconds(launch):
    """Three agents for a 3-node job, two of them told --node_rank=1: before, the refused one
    failed late or the others waited for the join timeout (900 s)."""
    common = ["--nnodes=3", "--master_addr=127.0.0.1", "--master_port=29731", "/bin/true"]
    start = time.monotonic()
    procs = [launch([f"--node_rank={r}", *common]) for r in (0, 1)]
    time.sleep(0.5)
    procs.append(launch(["--node_rank=1", *common]))
    rcs = [p.wait(30) for p in procs]
    elapsed = time.monotonic() - start
    assert all(rc != 0 for rc in rcs), [p.output() for p in procs]
    assert elapsed < 10, elapsed
    for p in procs:
        assert "node rank 1 was claimed twice" in p.stderr(), p.output()


def test_a_second_node_rank_zero_is_refused_by_name(launch):
    common = ["--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1", "--master_port=29733"]
    first = launch([*common, PYTHON, "-c", "import time; time.sleep(30)"])
    time.sleep(0.5)
    start = time.monotonic()
    second = launch([*common, "/bin/true"])
    assert second.wait(30) != 0
    assert first.wait(30) != 0
    assert time.monotonic() - start < 10
    for p in (first, second):
        assert "node rank 0 was claimed twice" in p.stderr(), p.output()
    assert "address already in use" not in second.stderr()


def test_doctor_connects_to_the_endpoint():
    r = run_ddprun(["doctor", "--nnodes=2", "--node_rank=1", "--master_addr=no-such-host.invalid"])
    assert r.rc == 1, r
    assert re.search(r"fail\s+rendezvous no-such-host\.invalid:29500\s+cannot reach", r.stdout), r
    inside = run_ddprun(["doctor"], env=step_env(1))
    assert "slurm step" in inside.stdout and "4242.0, node 1 of 2" in inside.stdout, inside


def test_a_slurm_configuration_that_cannot_be_read_is_said(tmp_path):
    """scontrol failing (slurmctld down) left KillWait unchecked without a word (attack 84)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(bin_dir, "scontrol", "#!/bin/sh\necho 'slurm_load_ctl_conf error' >&2\nexit 1\n")
    env = step_env(0, nodes=1, PATH=f"{bin_dir}:{base_env()['PATH']}")
    r = run_ddprun(["--nproc_per_node=1", *sh("exit 0")], env=env)
    assert r.rc == 0, r
    assert ("Slurm's configuration was not read (scontrol show config failed or did not answer "
            "within 5 s: is slurmctld up?): --shutdown_timeout is not checked") in r.stderr, r
    # One that answers is read: its KillWait below --shutdown_timeout is warned about.
    write_script(bin_dir, "scontrol", "#!/bin/sh\necho 'KillWait                = 3 sec'\n")
    r = run_ddprun(["--nproc_per_node=1", "--shutdown_timeout=10", *sh("exit 0")], env=env)
    assert r.rc == 0, r
    assert "was not read" not in r.stderr, r
    assert "--shutdown_timeout=10 is longer than Slurm's KillWait (3 s" in r.stderr, r


def fnv1a(text):
    h = 2166136261
    for byte in text.encode():
        h = ((h ^ byte) * 16777619) % 2**32
    return h


def test_a_derived_store_port_held_by_another_job_says_where_it_came_from(tmp_path):
    """The store's port is derived from the step id; another job's step on the node may hold
    it. The error blamed --master_addr/--master_port, which the user never gave (attack 84)."""
    env = step_env(0, job="777")
    port = 20000 + fnv1a("777.0") % 10000  # env/slurm.cpp's SlurmStepPort
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
        held.listen()
        r = run_ddprun(["--nproc_per_node=1", *sh("exit 0")], env=env)
    assert r.rc == 1, r
    assert ("(taken from Slurm step 777.0: its port is derived from the step's id, and another "
            "job's step on this node may hold it; give every node the same --master_port=PORT)"
            ) in r.stderr, r
