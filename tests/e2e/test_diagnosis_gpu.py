"""The GPU half of the diagnosis catalogue and of --hang_detect=torch, on real NCCL: two ranks on
one GPU, an invalid device ordinal, CUDA out of memory, a device-side assert, NCCL's watchdog
timeout, and a PyTorch NCCL job whose rank 1 stops calling all_reduce (PyTorch's dump pipe,
fr_trace and NCCL's RAS).

Several NCCL ranks on a machine with one GPU run through tests/tools/onehost_python (a UTS
namespace and NCCL_HOSTID per rank; needs root). Every test skips with "skipped: no CUDA device"
where nvidia-smi lists no GPU or torch sees none (scripts/gpu-check.sh fails on that line)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, base_env, run_ddprun

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs" / "diagnosis"
ONEHOST = HERE.parent / "tools" / "onehost_python"


def torch_gpus():
    try:
        r = subprocess.run([PYTHON, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
        return int(r.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


GPUS = torch_gpus() if shutil.which("nvidia-smi") else 0


@pytest.fixture(autouse=True)
def need_gpu():
    if GPUS == 0:
        print("skipped: no CUDA device")
        pytest.skip("skipped: no CUDA device")


def gpu_env(**extra):
    """base_env with the GPUs visible (it hides them for the CPU tests)."""
    return base_env(CUDA_VISIBLE_DEVICES=None, **extra)


def one_host_per_rank(**extra):
    """Two NCCL ranks that may share GPU 0: each its own host to NCCL."""
    if os.geteuid() != 0:
        pytest.skip("onehost_python needs root (unshare --uts)")
    return gpu_env(PYTHON_EXEC=str(ONEHOST), ONEHOST_PYTHON=PYTHON, **extra)


def cause_fix(r):
    cause = [ln[14:] for ln in r.stderr.splitlines() if ln.startswith("  cause     : ")]
    fix = [ln[14:] for ln in r.stderr.splitlines() if ln.startswith("  fix       : ")]
    assert len(cause) == 1 and len(fix) == 1, r
    return cause[0], fix[0]


def test_two_ranks_on_one_gpu_are_named():
    # No onehost: both ranks are on this host, and NCCL sees them share a device.
    r = run_ddprun(["--nproc_per_node=2", PROGRAMS / "gpu_duplicate.py"], env=gpu_env(),
                   timeout=180)
    assert r.rc == 1, r
    cause, fix = cause_fix(r)
    assert re.match(r"ranks \d and \d both use CUDA device \w+ \(", cause), cause
    assert "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))" in fix, fix


def test_an_invalid_device_ordinal_is_explained():
    r = run_ddprun(["--nproc_per_node=2", PROGRAMS / "gpu_ordinal.py"],
                   env=gpu_env(GPU_ORDINAL_OFFSET=str(max(GPUS - 1, 0))), timeout=180)
    assert r.rc == 1, r
    cause, fix = cause_fix(r)
    assert cause.startswith("a worker asked for a CUDA device index it does not see ("), cause
    assert "--nproc_per_node=2" in cause, cause
    assert "cuda:LOCAL_RANK" in fix, fix


def test_cuda_out_of_memory_names_the_gpu_and_sizes():
    r = run_ddprun(["--nproc_per_node=2", "--shutdown_timeout=2", PROGRAMS / "gpu_oom.py"],
                   env=gpu_env(), timeout=180)
    assert r.rc == 1, r
    cause, fix = cause_fix(r)
    assert re.match(r"GPU \d+ had [\d.]+ \w+ free of [\d.]+ \w+ when [\d.]+ \w+ more was asked", cause), cause
    assert "expandable_segments" in fix, fix


def test_a_device_side_assert_names_the_label_out_of_range():
    r = run_ddprun(["--nproc_per_node=2", "--shutdown_timeout=2",
                    PROGRAMS / "gpu_device_assert.py"], env=gpu_env(), timeout=180)
    assert r.rc == 1, r
    cause, fix = cause_fix(r)
    assert cause.startswith("a CUDA kernel's assertion failed"), cause
    assert "CUDA_LAUNCH_BLOCKING=1" in fix, fix
    # The device runtime prints the assertion itself; ddprun reads the last lines of stderr (not
    # of a stdout shown on the console), so the condition is named when it came on stderr.
    if "Assertion `t >= 0 && t < n_classes` failed" in r.stderr:
        assert cause.endswith("a target class index is outside [0, number of classes): the loss "
                              "got a label the model has no output for"), cause
    else:
        print("the assertion line came on stdout:", "n_classes" in r.stdout)


def test_the_nccl_watchdog_timeout_names_the_collective():
    r = run_ddprun(["--nproc_per_node=2", "--shutdown_timeout=2", PROGRAMS / "gpu_watchdog.py"],
                   env=one_host_per_rank(), timeout=240)
    assert r.rc != 0, r
    cause, fix = cause_fix(r)
    assert re.match(r"rank 0 waited 5000 ms \(the process group's timeout\) in collective number "
                    r"\d+, a ALLREDUCE", cause), cause
    assert "--hang_timeout" in fix, fix


def test_a_pytorch_nccl_hang_is_named_with_pytorchs_own_dumps_and_ras(tmp_path):
    r = run_ddprun(["--nproc_per_node=2", "--hang_timeout=5", "--hang_detect=torch",
                    "--shutdown_timeout=2", f"--log_dir={tmp_path}", HERE / "pytorch_hang_job.py",
                    "--backend", "nccl", "--hang-step", "20"],
                   env=one_host_per_rank(), timeout=300)
    print(r.stderr[-6000:])
    assert r.rc == 124, r
    assert re.search(r"hang, by PyTorch's collectives: rank 1 did not enter nccl:all_reduce #\d+",
                     r.stderr), r
    assert "dump asked through PyTorch's pipe" in r.stderr, r
    assert "missing ranks: {1}" in r.stderr, r
    # NCCL's RAS, asked at the job's own NCCL_RAS_ADDR: a report, not a refusal.
    ras = r.stderr[r.stderr.index("nccl ras (NCCL_RAS_ADDR="):]
    assert re.search(r"communicator|Communicators|NCCL", ras.split("fr_trace")[0]), ras
    assert "connect 127.0.0.1" not in ras.split("fr_trace")[0], ras
    torch_dir = next(Path(tmp_path).glob("*/attempt_0/dumps/torch"))
    assert list(torch_dir.glob("nccl_ras.*")), list(torch_dir.iterdir())
