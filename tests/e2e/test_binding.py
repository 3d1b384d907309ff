"""--cpu_binding and --numa_binding bind each worker to its CPUs before exec: a worker reads
its own Cpus_allowed_list, OMP_NUM_THREADS follows its share, and the launcher logs the plan."""

import os
import shutil
import subprocess

import pytest

from conftest import DDPRUN, base_env, sh

TASKSET = shutil.which("taskset")

# Each worker writes "<Cpus_allowed_list> <OMP_NUM_THREADS>" to <dir>/<LOCAL_RANK>.
REPORT = ('echo "$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) '
          '${OMP_NUM_THREADS-unset}" > "$0/$LOCAL_RANK"')


def run_report(flags, out_dir, prefix=(), env=None):
    """Runs ddprun FLAGS with REPORT; returns ({local rank: (cpus, omp)}, stderr)."""
    proc = subprocess.run([*prefix, str(DDPRUN), *flags, *sh(REPORT), str(out_dir)],
                          env=env or base_env(OMP_NUM_THREADS=None), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = {int(p.name): tuple(p.read_text().split()) for p in out_dir.iterdir()}
    return seen, proc.stderr


def needs_cpus(n):
    if len(os.sched_getaffinity(0)) < n:
        pytest.skip(f"needs {n} allowed CPUs")


@pytest.mark.skipif(TASKSET is None, reason="taskset (util-linux) is not installed")
def test_compact_gives_each_worker_its_own_cpu(tmp_path):
    needs_cpus(2)
    cpus = sorted(os.sched_getaffinity(0))[:2]
    seen, err = run_report(["--cpu_binding=compact", "--nproc_per_node=2"], tmp_path,
                           [TASKSET, "-c", f"{cpus[0]},{cpus[1]}"])
    assert sorted(seen) == [0, 1]
    assert {seen[0][0], seen[1][0]} == {str(cpus[0]), str(cpus[1])}
    assert seen[0][1] == seen[1][1] == "1"  # OMP_NUM_THREADS: the size of each share
    assert f"--cpu_binding=compact: local rank 0: {seen[0][0]}, local rank 1: {seen[1][0]}" in err


@pytest.mark.skipif(TASKSET is None, reason="taskset (util-linux) is not installed")
def test_spread_on_one_cpu_shares_it_and_says_so(tmp_path):
    cpu = min(os.sched_getaffinity(0))
    seen, err = run_report(["--cpu_binding=spread", "--nproc_per_node=2"], tmp_path,
                           [TASKSET, "-c", str(cpu)])
    assert seen == {0: (str(cpu), "1"), 1: (str(cpu), "1")}
    assert "ranks share CPUs" in err
    assert f"local rank 0: {cpu}, local rank 1: {cpu}" in err


def test_numa_binding_node_binds_to_the_allowed_cpus_of_the_node(tmp_path):
    nodes = [d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")]
    if len(nodes) != 1:
        pytest.skip("expects a machine with one NUMA node")
    allowed = sorted(os.sched_getaffinity(0))
    seen, err = run_report(["--numa_binding=node", "--nproc_per_node=2"], tmp_path)
    # Without GPU information both ranks belong to the one node: every allowed CPU.
    expected = {int(c) for part in seen[0][0].split(",") for c in
                range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)}
    assert expected == set(allowed)
    assert seen[0][0] == seen[1][0]
    assert "--numa_binding=node: local rank 0: " in err


def test_binding_options_are_mutually_exclusive(tmp_path):
    proc = subprocess.run([str(DDPRUN), "--numa_binding=node", "--cpu_binding=spread",
                           *sh("true")], env=base_env(), capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2
    assert "give one of them" in proc.stderr
