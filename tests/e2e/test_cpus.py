"""The CPUs ddprun counts are those it may run on (taskset, cgroup, Slurm), not every online
CPU: --nproc_per_node=cpu and the default OMP_NUM_THREADS follow them."""

import os
import shutil
import subprocess

import pytest

from conftest import DDPRUN, base_env, sh

TASKSET = shutil.which("taskset")
pytestmark = pytest.mark.skipif(TASKSET is None, reason="taskset (util-linux) is not installed")

REPORT = 'echo "$LOCAL_RANK ${OMP_NUM_THREADS-unset}" > "$0/$LOCAL_RANK"'


def run_pinned(cpus, flags, out_dir, env):
    """ddprun FLAGS under `taskset -c CPUS`; returns {local rank: OMP_NUM_THREADS}."""
    proc = subprocess.run([TASKSET, "-c", cpus, str(DDPRUN), *flags, *sh(REPORT), str(out_dir)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = {}
    for path in out_dir.iterdir():
        rank, threads = path.read_text().split()
        seen[int(rank)] = threads
    return seen, proc.stderr


def cpus_allowed():
    return len(os.sched_getaffinity(0))


def test_nproc_per_node_cpu_counts_the_cpus_taskset_allows(tmp_path):
    seen, _ = run_pinned("0", ["--nproc_per_node=cpu"], tmp_path, base_env())
    assert seen == {0: "1"}  # 1 worker: OMP_NUM_THREADS from base_env, untouched


def test_nproc_per_node_auto_without_gpus_counts_the_allowed_cpus(tmp_path):
    seen, _ = run_pinned("0", ["--nproc_per_node=auto"], tmp_path, base_env())
    assert sorted(seen) == [0]


def test_unset_omp_num_threads_shares_the_allowed_cpus_out(tmp_path):
    if cpus_allowed() < 2:
        pytest.skip("needs 2 CPUs to pin to")
    seen, err = run_pinned("0,1", ["--nproc_per_node=2"], tmp_path,
                           base_env(OMP_NUM_THREADS=None))
    assert seen == {0: "1", 1: "1"}
    assert "OMP_NUM_THREADS is not set: setting it to 1 for each of the 2 workers " \
           "(2 allowed CPUs shared out" in err


def test_unset_omp_num_threads_on_one_cpu_is_1_per_worker(tmp_path):
    seen, err = run_pinned("0", ["--nproc_per_node=3"], tmp_path, base_env(OMP_NUM_THREADS=None))
    assert seen == {0: "1", 1: "1", 2: "1"}
    assert "(1 allowed CPUs shared out" in err


def test_slurm_cpus_on_node_narrows_the_count(tmp_path):
    seen, _ = run_pinned("0" if cpus_allowed() < 2 else "0,1", ["--nproc_per_node=cpu"], tmp_path,
                         base_env(SLURM_CPUS_ON_NODE="1"))
    assert sorted(seen) == [0]
