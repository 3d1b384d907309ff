"""What the tests of examples/train share: where it is, a clean environment, its reference
run and how to read its output."""
import os
import re
import subprocess
from pathlib import Path

import pytest

DDPRUN = os.environ["DDPRUN"]
TRAIN = str(Path(os.environ["DDPRUN_BUILD"]) / "examples" / "train")
SMALL = ["--width", "64", "--depth", "2", "--steps", "20", "--batch", "16"]


def train_env(**extra):
    """This process's environment without any launcher variable, one thread per worker."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "TORCHELASTIC_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_",
                             "SLURM_", "SLURMD_"))}
    e.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    e.update(extra)
    return e


def reference(world, *args):
    """The checksum `train --reference --world-size world` computes in one process."""
    r = subprocess.run([TRAIN, "--reference", "--world-size", str(world), *args],
                       env=train_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return float(re.search(r"reference checksum (\S+)", r.stdout).group(1))


def checksums(stdout):
    return {int(r): float(c) for r, c in re.findall(r"rank (\d+) checksum (\S+)", stdout)}


def losses(stdout):
    return [float(x) for x in re.findall(r"step \d+ loss (\S+)", stdout)]


def assert_matches_reference(stdout, world, args, rel, loss_falls=True):
    """Every rank printed its checksum, all the same, equal to the reference run's within `rel`,
    and (when `loss_falls`) the loss fell."""
    sums = checksums(stdout)
    assert sorted(sums) == list(range(world)), stdout
    assert len(set(sums.values())) == 1, sums  # every rank ends with the same parameters
    ref = reference(world, *args)
    assert sums[0] == pytest.approx(ref, rel=rel), (sums[0], ref)
    if loss_falls:
        curve = losses(stdout)
        assert len(curve) >= 2 and curve[-1] < curve[0], curve


def rank_pids(ddprun_pid, count, timeout=60):
    """{RANK: pid} of the ddprun's worker processes, once `count` of them run."""
    from conftest import wait_for
    ranks = {}

    def found():
        with open(f"/proc/{ddprun_pid}/task/{ddprun_pid}/children") as f:
            for pid in map(int, f.read().split()):
                try:
                    with open(f"/proc/{pid}/environ", "rb") as e:
                        rank = re.search(rb"(?:^|\0)RANK=(\d+)", e.read())
                except OSError:
                    continue  # exited meanwhile
                if rank:
                    ranks[int(rank.group(1))] = pid
        return len(ranks) >= count
    wait_for(found, timeout=timeout, what=f"{count} workers of ddprun {ddprun_pid}")
    return ranks


def freeze_inside_a_collective(p, seconds=5):
    """Once both ranks of the ddprun `p` (conftest's Launched) train, stops rank 1, then the whole
    job (ddprun included) for `seconds`, as scontrol suspend would: rank 0 waits for rank 1 in a
    collective all that time."""
    from conftest import freeze_job, wait_for
    ranks = rank_pids(p.pid, 2)
    wait_for(lambda: "step 0 loss" in p.stdout(), timeout=60, what="both ranks training")
    freeze_job(p.pid, seconds, first=ranks[1])
