"""A real Slurm (tests/e2e/slurm_cluster.py) whose node names are Slurm's own and do not resolve
(NodeName=ddpn1 NodeAddr=127.0.0.2), as on many clusters; and a job made of one step per node,
as scripts written for torchrun run it. Both found by an attacking helper: doctor failed the
rendezvous that the launch reaches through NodeAddr, and the per-node steps were refused."""
import re

import pytest

from conftest import DDPRUN, base_env, free_port
from slurm_cluster import SlurmCluster, SlurmError, missing

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))

NAMES = ["ddpn1", "ddpn2"]
SRUN_TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster():
    try:
        c = SlurmCluster(nodes=2, cpus=2, names=NAMES)
        c.start()
    except SlurmError as e:
        pytest.fail(f"the local Slurm cluster did not come up: {e}")
    yield c
    c.stop()


def job_env(cluster):
    env = {k: v for k, v in base_env().items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    return env


def test_doctor_and_the_launch_both_find_the_store_at_the_nodeaddr(cluster):
    port = free_port()
    step = ["-N", 2, "--ntasks-per-node=1", "-l"]
    run = cluster.srun([*step, DDPRUN, f"--master_port={port}", "--nproc_per_node=1",
                        "--no_python", "/bin/sh", "-c", "echo rank $RANK of $WORLD_SIZE"],
                       timeout=SRUN_TIMEOUT, env=job_env(cluster))
    msg = f"srun rc={run.returncode}\n{run.stdout}\n{run.stderr}\n{cluster.log_tails()}"
    assert run.returncode == 0, msg
    assert "rank 0 of 2" in run.stdout and "rank 1 of 2" in run.stdout, msg
    assert "Slurm node ddpn1 does not resolve here: the store is at its NodeAddr 127.0.0.2" \
        in run.stderr, msg
    doctor = cluster.srun([*step, DDPRUN, "doctor", f"--master_port={free_port()}"],
                          timeout=SRUN_TIMEOUT, env=job_env(cluster))
    msg = f"srun rc={doctor.returncode}\n{doctor.stdout}\n{doctor.stderr}"
    assert doctor.returncode == 0, msg
    assert "cannot reach" not in doctor.stdout, msg
    assert "Slurm node ddpn1 does not resolve here: the store is at its NodeAddr 127.0.0.2" \
        in doctor.stdout, msg


def test_one_step_per_node_with_the_rendezvous_given_forms_one_job(cluster, tmp_path):
    port = free_port()
    out = cluster.dir / "jobs"
    script = tmp_path / "job.sh"
    lines = ["#!/bin/bash"]
    for rank, name in enumerate(NAMES):
        lines.append(f"srun -N1 -n1 -w {name} --overlap {DDPRUN} --nnodes=2 --node_rank={rank} "
                     f"--master_addr=127.0.0.2 --master_port={port} --nproc_per_node=1 "
                     f"--no_python /bin/sh -c 'echo rank $RANK of $WORLD_SIZE' "
                     f"> {out}/step{rank}.log 2>&1 &")
    lines.append("wait")
    script.write_text("\n".join(lines) + "\n")
    job = cluster.sbatch(["-N", 2, "-n", 2, "-o", out / "job.out", script], env=job_env(cluster))
    cluster.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), SRUN_TIMEOUT)
    logs = [(out / f"step{rank}.log").read_text() for rank in range(2)]
    msg = "\n".join(logs) + cluster.log_tails()
    assert "rank 0 of 2" in logs[0] and "rank 1 of 2" in logs[1], msg
    for log in logs:
        assert "the job's other nodes come from other steps" in log, msg


def test_a_node_that_cannot_start_ends_the_step_at_once(cluster, tmp_path):
    """Node 1's program is missing there (a node-local path, a bad mount): its ddprun exits 127
    before it joins; node 0 waited for it until the join timeout (900 s, the step kept alive:
    attack 84). Node 1 tells the job record, and node 0 fails at once naming node 1."""
    prog = cluster.dir / "jobs" / "prog.sh"
    prog.write_text("#!/bin/sh\necho worker $RANK done\n")
    prog.chmod(0o755)
    script = (f'P={prog}; [ "$SLURM_NODEID" = 1 ] && P=/nonexistent/prog.sh; '
              f'exec {DDPRUN} --nproc_per_node=1 --master_port={free_port()} "$P"')
    run = cluster.srun(["-N", 2, "--ntasks-per-node=1", "-l", "/bin/bash", "-c", script],
                       timeout=SRUN_TIMEOUT, env=job_env(cluster))
    msg = f"srun rc={run.returncode}\n{run.stdout}\n{run.stderr}\n{cluster.log_tails()}"
    assert run.returncode == 127, msg
    assert re.search(r"^0: .*the job failed: node 1 \(ddpn2\): ddprun could not start there: "
                     r"cannot run /nonexistent/prog\.sh", run.stderr, re.M), msg
    assert "1: [" in run.stderr and "the job's other nodes were told" in run.stderr, msg

