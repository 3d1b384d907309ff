"""The trainer's CUDA path end to end: examples/train --device cuda under ddprun (NCCL, the
model and the reducer's buckets in device memory) against the CPU --reference run.

Every test skips with "skipped: no CUDA device" where `nvidia-smi -L` lists no GPU
(scripts/gpu-check.sh fails on that line where a GPU should be)."""
import ctypes
import ctypes.util
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from trainlib import (DDPRUN, SMALL, TRAIN, assert_matches_reference, checksums,
                      freeze_inside_a_collective, losses, train_env)
REL = 1e-4  # cuBLAS and OpenBLAS sum in different orders
# SMALL's model, run for as long as it takes a rank to hang or crash.
LONG = [a if prev != "--steps" else "100000" for prev, a in zip([None] + SMALL, SMALL)]


def gpu_count():
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if r.returncode != 0:
        return 0
    return len(re.findall(r"^GPU \d+", r.stdout, re.MULTILINE))


GPUS = gpu_count()


@pytest.fixture(autouse=True)
def need_gpu():
    if GPUS == 0:
        print("skipped: no CUDA device")
        pytest.skip("skipped: no CUDA device")


def nccl_version():
    """The runtime NCCL's version as (major, minor), or None when it cannot be loaded."""
    candidates = ["/usr/local/cuda/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                  ctypes.util.find_library("nccl") or "libnccl.so.2"]
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return None
        v = code.value  # >= 2.9: major*10000 + minor*100 + patch
        return (v // 10000, v // 100 % 100) if v >= 10000 else (v // 1000, v // 100 % 10)
    return None


def env(**extra):
    return train_env(NVIDIA_TF32_OVERRIDE="0", **extra)


def ddprun_cuda(nproc, *args, extra_env=None):
    return subprocess.run([DDPRUN, f"--nproc_per_node={nproc}", "--shutdown_timeout=5", TRAIN,
                           "--device", "cuda", *args], env=env(**(extra_env or {})),
                          capture_output=True, text=True, timeout=180)


def assert_cuda_matches_reference(world, args, extra_env=None):
    r = ddprun_cuda(world, *args, extra_env=extra_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_matches_reference(r.stdout, world, args, REL)


@pytest.mark.parametrize("extra", [[], ["--optimizer", "adam"], ["--clip"],
                                   ["--unused-layer", "--find-unused-parameters"]])
def test_one_rank_on_cuda_matches_the_reference(extra):
    assert_cuda_matches_reference(1, SMALL + extra)


def test_two_ranks_on_cuda_match_the_reference():
    if GPUS >= 2:
        assert_cuda_matches_reference(2, SMALL)
        assert_cuda_matches_reference(2, SMALL + ["--optimizer", "adam", "--bucket-cap-mb", "0.01"])
        return
    version = nccl_version()
    if version is None or version < (2, 30):
        pytest.skip(f"2 ranks on 1 GPU need NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1; "
                    f"the runtime NCCL is {version}")
    pytest.skip("2 ranks on 1 GPU: NCCL allows it, but the trainer puts each local rank on "
                "device LOCAL_RANK and the NCCL group refuses two ranks on one device")


# Several ranks on one GPU: each in a UTS namespace with its own NCCL_HOSTID (tests/tools/onehost),
# so NCCL takes them for hosts of their own. Root only (unshare).
ONEHOST = str(Path(__file__).resolve().parents[1] / "tools" / "onehost")


def ddprun_onehost(nproc, *args, launcher=(), timeout=240):
    if os.geteuid() != 0:
        pytest.skip("several ranks on one GPU need root (tests/tools/onehost: unshare --uts)")
    start = time.monotonic()
    r = subprocess.run([DDPRUN, f"--nproc_per_node={nproc}", "--shutdown_timeout=5", *launcher,
                        ONEHOST, TRAIN, "--device", "cuda", *args], env=env(),
                       capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - start


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("extra", [[], ["--optimizer", "adam", "--bucket-cap-mb", "0.01"],
                                   ["--clip"], ["--unused-layer", "--find-unused-parameters"]])
def test_ranks_sharing_one_gpu_match_the_reference(world, extra):
    args = SMALL + extra
    r, _ = ddprun_onehost(world, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_matches_reference(r.stdout, world, args, REL)


def test_a_hung_nccl_rank_is_named_by_the_flight_recorders(tmp_path):
    r, elapsed = ddprun_onehost(2, *LONG, "--hang-at-step", "30",
                                "--hang-rank", "1",
                                launcher=["--hang_timeout=4", f"--log_dir={tmp_path}"])
    assert r.returncode == 124, r.stderr
    assert re.search(r"rank 1 completed #\d+ and has not entered #\d+", r.stderr), r.stderr
    print(f"named and stopped {elapsed:.1f} s after the start")


def test_an_nccl_collective_timeout_aborts_instead_of_hanging():
    r, elapsed = ddprun_onehost(2, *LONG, "--hang-at-step", "5",
                                "--hang-rank", "1", "--collective-timeout", "5")
    assert r.returncode != 0, r.stdout
    assert elapsed < 60, elapsed
    assert re.search(r"allreduce #\d+ .*timed out after \d", r.stderr), r.stderr


def test_an_nccl_job_suspended_whole_inside_a_collective_does_not_time_it_out(launch):
    # As test_train.py's Gloo case: the watchdog leaves out the 5 s this process did not run.
    if os.geteuid() != 0:
        pytest.skip("several ranks on one GPU need root (tests/tools/onehost: unshare --uts)")
    p = launch(["--nproc_per_node=2", ONEHOST, TRAIN, "--device", "cuda", "--width", "256",
                "--depth", "4", "--batch", "64", "--steps", "5000", "--collective-timeout", "2"],
               env=env())
    freeze_inside_a_collective(p)
    assert p.wait(timeout=240) == 0, p.output()
    assert "timed out" not in p.stderr(), p.output()
    sums = checksums(p.stdout())
    assert sorted(sums) == [0, 1] and len(set(sums.values())) == 1, p.output()


def test_a_crashed_nccl_rank_makes_the_others_fail_fast():
    r, elapsed = ddprun_onehost(2, *LONG, "--crash-at-step", "5",
                                "--hang-rank", "1")
    assert r.returncode == 1, r.stderr
    assert elapsed < 60, elapsed
    assert re.search(r"Root Cause.*\n\[0\]:\n.*\n.*\n  rank      : 1", r.stderr), r.stderr


# --amp on CUDA: 16-bit GEMMs on the tensor cores (fp32 accumulation) against the CPU reference's
# emulation, which rounds at the same places; the GEMMs sum in another order, so a value near a
# rounding boundary can land on the other side. Stated tolerance: the checksum within AMP_REL, and
# every printed loss within AMP_LOSS_REL of the reference's.
AMP_REL = 1e-3
AMP_LOSS_REL = 2e-2


def assert_amp_matches_reference(stdout, world, args):
    assert_matches_reference(stdout, world, args, AMP_REL)
    ref = subprocess.run([TRAIN, "--reference", "--world-size", str(world), *args], env=env(),
                         capture_output=True, text=True, timeout=120)
    assert ref.returncode == 0, ref.stderr
    mine, theirs = losses(stdout), losses(ref.stdout)
    assert len(mine) == len(theirs) >= 2, (mine, theirs)
    assert mine == pytest.approx(theirs, rel=AMP_LOSS_REL), (mine, theirs)


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
@pytest.mark.parametrize("extra", [[], ["--optimizer", "adam", "--clip"]])
def test_amp_on_cuda_matches_the_cpu_reference_amp(amp, extra):
    args = SMALL + ["--amp", amp] + extra
    r = ddprun_cuda(1, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_amp_matches_reference(r.stdout, 1, args)


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_ranks_sharing_one_gpu_match_the_reference(amp):
    args = SMALL + ["--amp", amp, "--bucket-cap-mb", "0.01"]
    r, _ = ddprun_onehost(2, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_amp_matches_reference(r.stdout, 2, args)


@pytest.mark.parametrize("amp,scale", [("fp16", "32768"), ("bf16", "1")])
def test_amp_nan_step_is_skipped_on_every_rank_with_the_parameter_named(amp, scale):
    args = SMALL + ["--amp", amp, "--nan-at-step", "3"]
    r, _ = ddprun_onehost(2, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"step 3: skipped \(inf/NaN gradients\), scale %s$" % scale, r.stdout,
                     re.MULTILINE), r.stdout
    assert "layers.1.weight" in r.stdout + r.stderr
    assert_amp_matches_reference(r.stdout, 2, args)


def test_gradients_as_bucket_views_on_cuda_train_as_copies():
    args = SMALL + ["--optimizer", "adam", "--bucket-cap-mb", "0.01"]
    views, copies = ddprun_cuda(1, *args), ddprun_cuda(1, *args, "--grad-copies")
    assert views.returncode == 0, views.stderr
    assert copies.returncode == 0, copies.stderr
    assert checksums(views.stdout) == checksums(copies.stdout)


# The DDP core's 16-bit buckets on NCCL: float32, float16 and bfloat16 parameters in device
# memory, 2 ranks sharing the GPU; every rank holds the mean in each type after every step (the
# float16 sum would overflow without the division before it).
MIXED_CUDA = str(Path(os.environ["DDPRUN_BUILD"]) / "tests" / "mixed_dtype_worker_cuda")


@pytest.mark.parametrize("flags", [[], ["--views"], ["--views", "--small-buckets"]])
def test_mixed_dtype_buckets_on_nccl(flags):
    if os.geteuid() != 0:
        pytest.skip("several ranks on one GPU need root (tests/tools/onehost: unshare --uts)")
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=5", ONEHOST,
                        MIXED_CUDA, "--device", "cuda", *flags], env=env(),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(re.findall(r"rank (\d+) ok", r.stdout)) == ["0", "1"], r.stdout


def test_more_local_ranks_than_devices_fails_naming_cuda_visible_devices():
    r = ddprun_cuda(GPUS + 1, *SMALL)
    assert r.returncode != 0, r.stdout
    assert f"LOCAL_RANK={GPUS} but only {GPUS} CUDA device(s) visible" in r.stderr, r.stderr
    assert "CUDA_VISIBLE_DEVICES" in r.stderr, r.stderr
