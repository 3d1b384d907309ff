"""GPUs are found through NVML and checked before any worker starts: ddprun loads the fake
NVML of tests/tools/fake_nvml.cpp (DDPRUN_NVML_LIBRARY), whose GPUs FAKE_NVML_DEVICES
describes; without it (this machine has no NVML) --nproc_per_node=gpu is a clear error."""

import os
import re

import pytest

from conftest import BUILD, base_env, run_ddprun, sh

FAKE_NVML = os.environ.get("DDPRUN_FAKE_NVML", str(BUILD / "tests" / "libfake_nvml.so"))
ONE_GPU = "GPU-aaaa1111:0000:17:00.0"
FOUR_GPUS = ("GPU-aaaa1111:0000:17:00.0,GPU-bbbb2222:0000:65:00.0,"
             "GPU-cccc3333:0000:b3:00.0+MIG-c1c1+MIG-c2c2,GPU-dddd4444:0000:ca:00.0")
# Each worker writes "<LOCAL_RANK> <CUDA_VISIBLE_DEVICES or unset>" to $0/<LOCAL_RANK>.
REPORT = 'echo "$LOCAL_RANK ${CUDA_VISIBLE_DEVICES-unset}" > "$0/$LOCAL_RANK"'

# Without NVML ddprun still counts the driver's /proc list: the no-NVML tests need a host without.
DRIVER_LISTS_GPUS = os.path.isdir("/proc/driver/nvidia/gpus") and bool(
    os.listdir("/proc/driver/nvidia/gpus"))
no_driver = pytest.mark.skipif(DRIVER_LISTS_GPUS, reason="the NVIDIA driver lists GPUs in /proc")

pytestmark = pytest.mark.skipif(not os.path.exists(FAKE_NVML),
                                reason=f"the fake NVML is not built: {FAKE_NVML}")


def fake_env(devices, **overrides):
    """The test environment with the fake NVML listing `devices`; CUDA_VISIBLE_DEVICES unset."""
    return base_env(**{"DDPRUN_NVML_LIBRARY": FAKE_NVML, "FAKE_NVML_DEVICES": devices,
                       "CUDA_VISIBLE_DEVICES": None, **overrides})


def run_workers(flags, env, out_dir):
    """Runs ddprun FLAGS with the REPORT worker; returns ({local rank: devices}, Result)."""
    r = run_ddprun([*flags, *sh(REPORT), out_dir], env=env)
    assert r.rc == 0, r
    seen = {}
    for path in out_dir.iterdir():
        rank, devices = path.read_text().split()
        seen[int(rank)] = devices
    return seen, r


def test_nproc_per_node_gpu_counts_the_gpus_nvml_lists(tmp_path):
    seen, _ = run_workers(["--nproc_per_node=gpu"], fake_env(FOUR_GPUS), tmp_path)
    assert seen == {0: "unset", 1: "unset", 2: "unset", 3: "unset"}


def test_nproc_per_node_auto_counts_the_visible_gpus(tmp_path):
    seen, _ = run_workers(["--nproc_per_node=auto"],
                          fake_env(FOUR_GPUS, CUDA_VISIBLE_DEVICES="3,1"), tmp_path)
    assert seen == {0: "3,1", 1: "3,1"}


def test_gpus_naming_missing_devices_is_refused_before_any_worker(tmp_path):
    marker = tmp_path / "started"
    r = run_ddprun(["--gpus", "0,6,7", "--nproc_per_node=3", *sh(f"touch {marker}")],
                   env=fake_env(ONE_GPU))
    assert r.rc == 2, r
    assert ("--gpus=0,6,7: 6, 7 name no GPU of this host, which has 1 GPU: "
            "0 GPU-aaaa1111 (0000:17:00.0)") in r.stderr, r
    assert not marker.exists()


def test_gpus_listing_a_device_twice_is_refused(tmp_path):
    r = run_ddprun(["--gpus", "1,GPU-bbbb", "--nproc_per_node=2", *sh("true")],
                   env=fake_env(FOUR_GPUS))
    assert r.rc == 2, r
    assert '"1" and "GPU-bbbb" are the same GPU' in r.stderr, r


def test_gpus_takes_uuid_prefixes_and_mig_uuids(tmp_path):
    seen, _ = run_workers(["--gpus", "GPU-dddd,MIG-c2c2", "--nproc_per_node=gpu"],
                          fake_env(FOUR_GPUS), tmp_path)
    assert seen == {0: "GPU-dddd,MIG-c2c2", 1: "GPU-dddd,MIG-c2c2"}


def test_cuda_visible_devices_uuids_count_like_cuda(tmp_path):
    seen, r = run_workers(["--nproc_per_node=gpu"],
                          fake_env(FOUR_GPUS, CUDA_VISIBLE_DEVICES="GPU-cccc,GPU-aaaa,GPU-9"),
                          tmp_path)
    assert sorted(seen) == [0, 1]  # CUDA stops at GPU-9
    assert "GPU-9 names no GPU of this host" in r.stderr, r


def test_slurm_step_gpus_narrow_the_workers_where_cuda_visible_devices_is_unset(tmp_path):
    seen, _ = run_workers(["--nproc_per_node=gpu"],
                          fake_env(FOUR_GPUS, SLURM_STEP_GPUS="1,3", SLURM_JOB_GPUS="0,1,2,3"),
                          tmp_path)
    assert seen == {0: "1,3", 1: "1,3"}


@pytest.mark.parametrize("given, warned", [({}, True),
                                           ({"SLURM_STEP_GPUS": "1"}, False),
                                           ({"CUDA_VISIBLE_DEVICES": "0,1"}, False)])
def test_gpus_a_slurm_job_was_not_given_are_warned_of(tmp_path, given, warned):
    """A Slurm job that asked for no GPU: nothing hides the host's, --nproc_per_node=gpu counts
    them all (other jobs' too) and said nothing (attack 84); doctor said "ok"."""
    env = fake_env(FOUR_GPUS, SLURM_JOB_ID="7", **given)
    seen, r = run_workers(["--nproc_per_node=gpu"], env, tmp_path)
    said = "counts every GPU of this host (4): this Slurm job was given none" in r.stderr
    assert said == warned, r
    assert len(seen) == (4 if not given else len(next(iter(given.values())).split(","))), seen
    if not given:
        step = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "1", "SLURM_NODEID": "0",
                "SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_STEP_TASKS_PER_NODE": "1",
                "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
        d = run_ddprun(["doctor"], env={**env, **step})
        assert re.search(r"warn\s+slurm gpus\s+none allocated, and the workers see all 4 GPUs",
                         d.stdout), d


def test_virtual_local_rank_with_too_few_gpus_is_refused(tmp_path):
    r = run_ddprun(["--virtual_local_rank", "--nproc_per_node=3", *sh("true")],
                   env=fake_env(ONE_GPU))
    assert r.rc == 2, r
    assert "needs one GPU per worker, but 1 GPU is visible" in r.stderr, r


def test_more_workers_than_gpus_is_a_warning(tmp_path):
    seen, r = run_workers(["--nproc_per_node=2"], fake_env(ONE_GPU), tmp_path)
    assert sorted(seen) == [0, 1]
    assert "local rank 1 has no GPU of its own" in r.stderr, r


def test_doctor_lists_each_gpu_and_the_visible_set():
    r = run_ddprun(["doctor"], env=fake_env(FOUR_GPUS, CUDA_VISIBLE_DEVICES="2"))
    assert r.rc == 0, r
    assert "GPUs" in r.stdout and "4 (NVML)" in r.stdout, r
    assert "GPU-bbbb2222, 0000:65:00.0, NUMA node" in r.stdout, r
    assert "80 GiB, MIG on: MIG-c1c1 MIG-c2c2" in r.stdout, r
    assert "1 of 4 (2) from CUDA_VISIBLE_DEVICES=2" in r.stdout, r


def test_doctor_warns_about_a_gpu_nvml_cannot_open_and_a_mig_gpu_without_instances():
    """Both were marked ok, and the doctor said OK (found by an attacking helper)."""
    r = run_ddprun(["doctor"], env=fake_env(ONE_GPU + ",GPU-bbbb2222:0000:65:00.0+",
                                            FAKE_NVML_LOST="0"))
    assert r.rc == 0, r  # warnings: the job may still run on the other GPUs
    assert re.search(r"^  warn\s+GPU 0\s+\(nvmlDeviceGetHandleByIndex_v2: GPU is lost", r.stdout,
                     re.M), r
    assert "a GPU lost from the bus needs a reset" in r.stdout, r
    assert re.search(r"^  warn\s+GPU 1\s+.*MIG on: no instance$", r.stdout, re.M), r
    assert "MIG is on but has no instance, so CUDA sees no device on this GPU" in r.stdout, r


def test_nproc_per_node_gpu_says_why_the_visible_list_leaves_none():
    r = run_ddprun(["--nproc_per_node=gpu", *sh("true")],
                   env=fake_env(FOUR_GPUS, CUDA_VISIBLE_DEVICES="1,1,2"))
    assert r.rc == 2, r
    assert "CUDA_VISIBLE_DEVICES=1,1,2 leaves none: " in r.stderr, r
    assert "GPU 1 is listed twice, so CUDA sees no GPU" in r.stderr, r


def test_doctor_says_why_there_is_no_nvml():
    r = run_ddprun(["doctor"], env=fake_env(ONE_GPU, FAKE_NVML_INIT_ERROR="9"))
    assert "none: no NVML: nvmlInit_v2: Driver Not Loaded (NVML error 9)" in r.stdout, r


@no_driver
def test_without_nvml_nproc_per_node_gpu_is_a_clear_error():
    r = run_ddprun(["--nproc_per_node=gpu", *sh("true")],
                   env=base_env(DDPRUN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1",
                                CUDA_VISIBLE_DEVICES=None))
    assert r.rc == 2, r
    assert "--nproc_per_node=gpu" in r.stderr and "no visible CUDA device" in r.stderr, r
    assert "no NVML: /nonexistent/libnvidia-ml.so.1" in r.stderr, r


@no_driver
def test_without_nvml_named_gpus_are_passed_on_with_one_warning(tmp_path):
    env = base_env(DDPRUN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    seen, r = run_workers(["--gpus", "0,6", "--nproc_per_node=2"], env, tmp_path)
    assert seen == {0: "0,6", 1: "0,6"}
    assert r.stderr.count("--gpus=0,6 not checked") == 1, r
