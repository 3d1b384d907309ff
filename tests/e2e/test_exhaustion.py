"""Resource exhaustion is an error, not a crash: under every `ulimit -n` and `ulimit -v` swept
here ddprun either runs the job (exit 0) or exits non-zero with a message on stderr that names
what ran out; it is never killed by a signal (SIGSEGV, SIGABRT) and never ends in an uncaught
C++ exception."""

import re
import resource
import signal
import subprocess
import time

import pytest

from conftest import BUILD, DDPRUN, PYTHON, base_env

# What a message must say when ddprun gives up for want of a resource. "Error 24" and
# "Error 12" are the dynamic loader's words for EMFILE and ENOMEM, and "failed to map segment"
# its words for an address-space limit below what the binary and its libraries take, all
# before ddprun runs at all.
NAMED = re.compile(r"too many open files|RLIMIT_NOFILE|RLIMIT_AS|cannot allocate memory|out of memory|"
                   r"out of threads|error 24\b|error 12\b|failed to map segment",
                   re.IGNORECASE)
CRASH = re.compile(r"terminate called|Assertion .* failed|core dumped|Segmentation fault")

MiB = 1 << 20

# Every small fd limit (the launcher's own start-up, its stores, loops and guardian) and a few
# where the job runs; the address-space limits cover failing thread stacks up to a run.
NOFILE_ALL = list(range(3, 72)) + [80, 96, 128, 256]
NOFILE_SOME = list(range(3, 72, 3)) + [80, 128]
ADDRESS_SPACE_MIB = [8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 56, 64, 96, 128, 256, 512, 1024,
                     2048]

ELASTIC = ["--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
           "--rdzv_conf=last_call_timeout=0.1"]


def run_limited(args, limit, value, timeout=30.0):
    """Runs ddprun ARGS with the soft and hard `limit` (resource.RLIMIT_*) set to `value`."""
    def lower():
        resource.setrlimit(limit, (value, value))

    start = time.monotonic()
    try:
        proc = subprocess.run([str(DDPRUN), *map(str, args)], env=base_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=timeout, preexec_fn=lower)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"ddprun {args} under limit {value} did not finish within {timeout}s\n"
                    f"{e.stderr}")
    return proc, time.monotonic() - start


def check_outcome(proc, what):
    """ddprun ran the job or said what ran out; never a signal, never an unnamed failure."""
    report = f"{what}: rc={proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode >= 0, f"killed by {signal.Signals(-proc.returncode).name}; {report}"
    assert not CRASH.search(proc.stderr), report
    if proc.returncode != 0:
        assert proc.returncode < 128, f"exit 128+N without a signal sent; {report}"
        assert NAMED.search(proc.stderr), f"failure does not name what ran out; {report}"


def sweep(args, limit, values, label, after_success=None):
    """Runs the sweep; returns how many values ran the job."""
    ran = 0
    for value in values:
        proc, _ = run_limited(args, limit, value)
        check_outcome(proc, f"{label}={value}")
        if proc.returncode == 0:
            ran += 1
            if after_success:
                after_success(proc, value)
    return ran


def test_fd_limit_sweep_plain_job():
    ran = sweep(["--nproc_per_node=2", "--no_python", "true"], resource.RLIMIT_NOFILE,
                NOFILE_ALL, "ulimit -n")
    assert ran >= 1, "the job never ran, not even at ulimit -n 256"


def test_fd_limit_sweep_logged_job(tmp_path):
    def printed(proc, value):
        assert proc.stdout.count("hello") == 2, f"ulimit -n {value}: {proc.stdout}"

    args = ["--nproc_per_node=2", "--tee=3", "--log_dir", tmp_path, "--no_python", PYTHON, "-c",
            "print('hello')"]
    ran = sweep(args, resource.RLIMIT_NOFILE, NOFILE_SOME, "ulimit -n", printed)
    assert ran >= 1


def test_fd_limit_sweep_elastic_job():
    args = [*ELASTIC, "--nproc_per_node=2", "--no_python", "true"]
    ran = sweep(args, resource.RLIMIT_NOFILE, NOFILE_SOME, "ulimit -n")
    assert ran >= 1


def test_fd_limit_below_need_names_the_limit():
    proc, _ = run_limited(["--nproc_per_node=2", "--no_python", "true"],
                          resource.RLIMIT_NOFILE, 40)
    assert proc.returncode == 1, proc.stderr
    assert "RLIMIT_NOFILE (ulimit -n) is too low" in proc.stderr
    assert "ulimit -n 1024" in proc.stderr


@pytest.mark.parametrize("job", ["plain", "logged", "elastic"])
def test_address_space_sweep(job, tmp_path):
    args = {
        "plain": ["--nproc_per_node=2", "--no_python", "true"],
        "logged": ["--nproc_per_node=2", "--tee=3", "--log_dir", tmp_path, "--no_python",
                   "/bin/sh", "-c", "echo hello"],
        "elastic": [*ELASTIC, "--nproc_per_node=2", "--no_python", "true"],
    }[job]
    ran = sweep(args, resource.RLIMIT_AS, [m * MiB for m in ADDRESS_SPACE_MIB], "ulimit -v (B)")
    assert ran >= 1, "the job never ran, not even with 2 GiB"


@pytest.mark.parametrize("nproc", [1, 2])
def test_address_space_sweep_of_the_trainer(nproc):
    """The trainer's GEMMs are OpenBLAS's, which maps a 128 MiB work buffer per thread at the
    first GEMM and retries a failed mapping forever: under a low ulimit -v a rank used to spin
    at 100% CPU without a word. It now runs (on one OpenBLAS thread when only one buffer fits)
    or says that ulimit -v leaves no room. With 2 ranks the process group's threads took the
    room between the check and the first GEMM, and both spun at 260-340 MiB (found by an
    attacking helper): OpenBLAS maps its buffers at the check now."""
    args = [f"--nproc_per_node={nproc}", BUILD / "examples" / "train", "--steps", "5", "--width",
            "256"]
    outcomes = []

    def ran(proc, value):
        assert "loss" in proc.stdout, proc.stdout

    grid = [256, 320, 384, 416, 448, 512, 768, 1024] if nproc == 1 else [240, 264, 288, 312, 336, 1024]
    for mib in grid:
        proc, _ = run_limited(args, resource.RLIMIT_AS, mib * MiB)
        check_outcome(proc, f"ulimit -v {mib} MiB")
        if proc.returncode == 0:
            ran(proc, mib)
        outcomes.append((mib, proc.returncode, "leaves no room for OpenBLAS" in proc.stderr))
    assert outcomes[-1][1] == 0, outcomes
    assert any(named for _, rc, named in outcomes if rc != 0), outcomes
