"""What the tests of installed ddprun share (test_install.py, test_package.py): running a command
that must succeed, and a 2-rank CPU job under an installed ddprun."""
import subprocess

import pytest
from conftest import base_env
from trainlib import checksums


def check_run(cmd, timeout, env=None, cwd=None):
    """Runs cmd to completion; fails the test, with its output, unless it exits 0."""
    cmd = [str(c) for c in cmd]
    try:
        r = subprocess.run(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout}s")
    if r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\n--- stdout\n{r.stdout}\n"
                    f"--- stderr\n{r.stderr}")
    return r


def run_two_ranks(ddprun, program, env=None):
    """ddprun --nproc_per_node=2 PROGRAM...; returns the checksum both ranks printed (they must
    print the same one, as DDP keeps their parameters equal)."""
    r = check_run([ddprun, "--nproc_per_node=2", "--shutdown_timeout=5", *program],
                  env=env or base_env(OPENBLAS_NUM_THREADS="1"), timeout=120)
    sums = checksums(r.stdout)
    assert sorted(sums) == [0, 1], r.stdout
    assert sums[0] == sums[1], sums
    return sums[0]
