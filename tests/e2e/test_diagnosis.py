"""The classic DDP failures, reproduced on Gloo with 2 ranks: the report's cause and fix lines
(supervisor/explain.cpp) name what the failure names."""
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DDPRUN, PYTHON, base_env, run_ddprun
import test_limits
from test_limits import run_as_user

test_user = test_limits.test_user  # fixtures shared with test_limits
user_dir = test_limits.user_dir

PROGRAMS = Path(__file__).parent / "programs" / "diagnosis"


# PyTorch 2.12 sometimes aborts a rank on its way out after the script raised: "terminate
# called without an active exception" (a process-group thread still joinable at interpreter
# exit; seen about once in 20 runs of nan_loss.py), and the rank ends by SIGABRT instead of 1.
TEARDOWN_ABORT = "terminate called without an active exception"


def diagnose(script, timeout=40, args=(), **env):
    r = run_ddprun(["--nproc_per_node=2", *args, PROGRAMS / script],
                   env=base_env(**{"GLOO_SOCKET_IFNAME": "lo", **env}), timeout=timeout)
    assert r.rc == 1 or (r.rc == 128 + signal.SIGABRT and TEARDOWN_ABORT in r.stderr), r
    return r


def lines(r):
    """The report's cause and fix lines."""
    cause = [ln for ln in r.stderr.splitlines() if ln.startswith("  cause     : ")]
    fix = [ln for ln in r.stderr.splitlines() if ln.startswith("  fix       : ")]
    assert len(cause) == 1 and len(fix) == 1, r
    return cause[0][14:], fix[0][14:]


def test_an_unused_parameter_is_named_by_its_indices():
    cause, fix = lines(diagnose("unused_parameter.py"))
    assert cause.startswith("DDP got no gradient for parameters with indices 2 3 on rank "), cause
    assert "find_unused_parameters=True" in fix and "TORCH_DISTRIBUTED_DEBUG=INFO" in fix, fix


def test_an_unused_parameter_is_named_by_its_name_under_debug_info():
    # DETAIL names them too, but its Gloo wrapper segfaults in torch 2.12.1 (under torchrun too).
    cause, fix = lines(diagnose("unused_parameter.py", TORCH_DISTRIBUTED_DEBUG="INFO"))
    assert "parameters unused.bias, unused.weight (indices 2 3) on rank " in cause, cause
    assert "TORCH_DISTRIBUTED_DEBUG" not in fix, fix


def test_a_buffer_edited_in_place_in_forward_is_explained():
    cause, fix = lines(diagnose("inplace_buffer.py"))
    assert cause.startswith("autograd saved the tensor [torch.FloatTensor [4]] for backward"), cause
    assert "(version 2, expected 1)" in cause, cause
    assert "broadcast_buffers=False" in fix, fix


def test_a_port_already_taken_is_named_with_its_holder():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        cause, fix = lines(diagnose("port_in_use.py", HELD_PORT=str(port)))
    assert cause.startswith(f"port {port} of this host is already in use (EADDRINUSE)"), cause
    assert f"(pid {os.getpid()}) listens on it" in cause, cause
    assert "--master_port" in fix, fix


def test_a_collective_without_init_process_group_is_explained():
    cause, fix = lines(diagnose("no_init.py"))
    assert cause == "the worker called torch.distributed before init_process_group", cause
    assert fix.startswith("call torch.distributed.init_process_group(backend)"), fix


def test_a_nan_loss_is_explained():
    cause, fix = lines(diagnose("nan_loss.py"))
    assert cause == "the loss became nan", cause
    assert "scaler.unscale_(optimizer) before clip_grad_norm_" in fix, fix


def test_a_dataloader_worker_dead_of_sigbus_names_dev_shm():
    cause, fix = lines(diagnose("bus_error.py"))
    assert "died of SIGBUS: batches pass through /dev/shm, which ran out (/dev/shm is " in cause
    assert "--shm-size" in fix and "--ipc=host" in fix, fix


def test_a_dataloader_batch_that_does_not_fit_in_dev_shm_names_dev_shm(tmp_path):
    """PyTorch's "unable to allocate shared memory(shm) for file </torch_...>: No space left on
    device" was blamed on another filesystem than the log directory's, /dev/shm unnamed (attack
    80). ddprun and its workers run in a mount namespace with a 2 MiB /dev/shm."""
    import shutil
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private /dev/shm")
    command = (f"mount -t tmpfs -o size=2M tmpfs /dev/shm && exec {DDPRUN} --nproc_per_node=1 "
               f"{PROGRAMS / 'shm_full.py'}")
    r = subprocess.run(["unshare", "-m", "sh", "-c", command], env=base_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    if "Operation not permitted" in r.stderr and "unshare" in r.stderr:
        pytest.skip(f"no mount namespace here: {r.stderr.strip()}")
    assert r.returncode == 1, r.stderr
    cause = [ln for ln in r.stderr.splitlines() if ln.startswith("  cause     : ")]
    assert len(cause) == 1, r.stderr
    assert "found /dev/shm full: PyTorch could not make its segment /torch_" in cause[0], cause
    assert "(/dev/shm is 2.0 MiB)" in cause[0], cause


def test_nccl_where_no_gpu_is_visible_says_why():
    cause, fix = lines(diagnose("nccl_without_gpu.py"))  # base_env: CUDA_VISIBLE_DEVICES=""
    assert cause == ("the workers made an NCCL process group, which needs GPUs, and saw none: "
                     "CUDA_VISIBLE_DEVICES is empty, which hides every GPU"), cause
    assert 'init_process_group("gloo")' in fix, fix


def test_a_socket_interface_this_host_lacks_is_named_at_start_and_in_the_report():
    r = diagnose("gloo_interface.py", GLOO_SOCKET_IFNAME="lo,ddp-nosuch0",
                 NCCL_SOCKET_IFNAME="=ddp-nosuch0")
    start = r.stderr.index("rendezvous round 0 complete")
    for warning in ("GLOO_SOCKET_IFNAME=lo,ddp-nosuch0: ddp-nosuch0 is no interface of this host",
                    "NCCL_SOCKET_IFNAME==ddp-nosuch0: no interface with an address is named "
                    "ddp-nosuch0"):
        assert 0 <= r.stderr.find(warning) < start, r  # said before any worker started
    cause, fix = lines(r)
    assert cause == ("Gloo found no address on this host for GLOO_SOCKET_IFNAME=lo,ddp-nosuch0: "
                     "ddp-nosuch0 is no interface of this host"), cause
    assert "lo 127.0.0.1" in fix and fix.endswith("or unset it"), fix


def test_ranks_that_built_different_models_are_named():
    cause, fix = lines(diagnose("model_mismatch.py"))
    assert cause == ("the ranks built different models: parameter 0 is [5, 4] on rank 1 and "
                     "another shape on rank 0"), cause
    assert "no layers that depend on the rank" in fix, fix


def test_a_process_group_made_again_that_reads_the_old_addresses_is_explained():
    pair = subprocess.run([PYTHON, PROGRAMS / "group_again.py", "--interfaces"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if not pair:
        pytest.skip("no interface with an IPv4 address above 127.0.0.1: group_again.py needs one "
                    "to make Gloo's rank 1 connect")
    r = diagnose("group_again.py")
    cause, fix = lines(r)
    assert re.match(r"Gloo was refused at 127\.0\.0\.1:\d+, the address another rank "
                    r"published in the job's store, while every rank was running", cause), cause
    assert "pytorch/pytorch#55967" in cause, cause
    assert 'store=PrefixStore(f"pg{n}/"' in fix, fix


@pytest.mark.parametrize("faulthandler", [True, False])
def test_a_native_crash_is_named_with_the_python_call_under_it(faulthandler):
    env = base_env(GLOO_SOCKET_IFNAME="lo", PYTHONFAULTHANDLER="1" if faulthandler else None)
    r = run_ddprun(["--nproc_per_node=2", PROGRAMS / "native_crash.py"], env=env)
    assert r.rc == 139, r  # 128 + SIGSEGV, the root cause's
    cause, fix = lines(r)
    if faulthandler:
        assert re.fullmatch(r"the worker crashed in native code \(SIGSEGV\) under the Python call "
                            r"string_at \(\S+/ctypes/__init__\.py, line \d+\), called from crash "
                            r"\(\S+/native_crash\.py, line 8\)", cause), cause
        assert "PYTHONFAULTHANDLER" not in fix, fix
    else:
        assert cause == "the worker crashed in native code (SIGSEGV)", cause
        assert fix.startswith("PYTHONFAULTHANDLER=1 prints each worker's Python stack"), fix


@pytest.mark.parametrize("core_limit", [resource.RLIM_INFINITY, 0])
def test_a_core_dump_is_located_where_the_kernel_put_it(tmp_path, core_limit):
    """With ulimit -c unlimited the crashed rank's core is named by core(5)'s rules (this host's
    core_pattern); with ulimit -c 0 none is dumped and no line says otherwise."""
    if core_limit and resource.getrlimit(resource.RLIMIT_CORE)[1] != resource.RLIM_INFINITY \
            and os.geteuid() != 0:
        pytest.skip("the hard RLIMIT_CORE is finite and only root raises it")
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    env = base_env(GLOO_SOCKET_IFNAME="lo")
    r = subprocess.run([str(DDPRUN), "--nproc_per_node=2", "--log_dir", tmp_path / "logs",
                        PROGRAMS / "native_crash.py"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE,
                                                             (core_limit, core_limit)))
    assert r.returncode == 139, r.stderr
    core = re.findall(r"^  core dump : (.*)$", r.stderr, re.M)
    if core_limit == 0:
        assert core == [], r.stderr
        return
    assert len(core) == 1, r.stderr
    if pattern.startswith("|"):
        assert core[0].startswith("piped to "), core
        return
    m = re.fullmatch(r"(/\S+) \((\d+\.\d) (KiB|MiB|GiB)\)", core[0])
    assert m, core
    assert Path(m.group(1)).is_file(), core
    if not pattern.startswith("/"):
        assert Path(m.group(1)).parent == tmp_path, core  # the workers' directory
    incident = json.loads(next((tmp_path / "logs").glob("*/incident.json")).read_text())
    assert incident["root_cause"]["failure"]["core_dump"] == core[0], incident


def test_the_core_of_a_worker_that_changed_directory_is_found_there(tmp_path):
    """core_pattern relative (the default "core"): the kernel writes the core where the worker
    was when it crashed. One that had changed directory (Hydra's runs do) was said to have left
    no core, "expected at <its start directory>/core" (attack 83); it is found below now."""
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith(("|", "/")):
        pytest.skip(f"core_pattern is {pattern!r} here, not a relative file name")
    if resource.getrlimit(resource.RLIMIT_CORE)[1] != resource.RLIM_INFINITY \
            and os.geteuid() != 0:
        pytest.skip("the hard RLIMIT_CORE is finite and only root raises it")
    (tmp_path / "outputs" / "run1").mkdir(parents=True)
    r = subprocess.run([str(DDPRUN), "--nproc_per_node=1", "--no_python", PYTHON, "-c",
                        "import os; os.chdir('outputs/run1'); os.abort()"],
                       env=base_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: resource.setrlimit(
                           resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))
    assert r.returncode == 134, r.stderr
    core = re.findall(r"^  core dump : (.*)$", r.stderr, re.M)
    assert len(core) == 1, r.stderr
    m = re.fullmatch(r"(/\S+) \(\d+\.\d [KMG]iB; the worker had changed directory\)", core[0])
    assert m, core
    assert Path(m.group(1)).parent == tmp_path / "outputs" / "run1", core


def test_a_shell_workers_128_plus_n_is_explained_as_its_commands_signal(tmp_path):
    """A worker that is a shell script exits 139 when the Python it ran died of SIGSEGV: the
    report says so, then what a SIGSEGV means."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n"
                      "python3 -c 'import ctypes; ctypes.string_at(0)'\n"
                      "exit $?\n")
    script.chmod(0o755)
    r = run_ddprun(["--nproc_per_node=1", "--no_python", script])
    assert r.rc == 139, r
    cause, fix = lines(r)
    assert cause == ("the worker, a shell, exited 139 = 128 + SIGSEGV: a command it ran died of "
                     "that signal; the worker crashed in native code (SIGSEGV)"), cause
    assert "PYTHONFAULTHANDLER=1" in fix, fix


def own_memory_cgroup():
    """This process's memory cgroup directory and its limit file: a v1 memory hierarchy's, else
    cgroup v2's where its memory controller is enabled; None otherwise."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory" + path), "memory.limit_in_bytes"
    for line in lines:
        if line.startswith("0::"):
            d = Path("/sys/fs/cgroup" + line[3:])
            if (d / "memory.events").exists() or (d / "cgroup.subtree_control").exists():
                return d, "memory.max"
    return None


@pytest.fixture
def memory_limited():
    """A child memory cgroup of this process's, limited to 200 MiB, swap included; removed at the
    end. Skips where none can be made (not root, no memory controller)."""
    found = own_memory_cgroup()
    if os.geteuid() != 0 or found is None:
        pytest.skip("a memory cgroup needs root and a memory controller")
    parent, limit_file = found
    cg = parent / f"ddprun-oom-{os.getpid()}"
    try:
        cg.mkdir()
        (cg / limit_file).write_text(str(200 << 20))
        for swap in ("memory.memsw.limit_in_bytes", "memory.swap.max"):
            if (cg / swap).exists():
                (cg / swap).write_text(str(200 << 20) if swap.startswith("memory.memsw") else "0")
    except OSError as e:
        if cg.exists():
            cg.rmdir()
        pytest.skip(f"cannot make a limited memory cgroup under {parent}: {e}")
    joined = subprocess.run(["sh", "-c", f'echo $$ > "{cg}/cgroup.procs"'], capture_output=True,
                            text=True)
    if joined.returncode != 0:  # e.g. cgroup v2's rule against processes in inner cgroups
        cg.rmdir()
        pytest.skip(f"cannot move a process into {cg}: {joined.stderr.strip()}")
    yield cg
    for _ in range(50):  # the workers' exit empties it
        try:
            cg.rmdir()
            break
        except OSError:
            time.sleep(0.1)


def test_a_worker_killed_by_the_oom_killer_is_named_with_the_cgroup_limit(memory_limited):
    script = PROGRAMS / "out_of_memory.py"
    env = base_env(GLOO_SOCKET_IFNAME="lo", FILL_MIB="1024")
    r = subprocess.run(["sh", "-c", f'echo $$ > "{memory_limited}/cgroup.procs" && exec "$0" "$@"',
                        str(DDPRUN), "--nproc_per_node=2", str(script)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 137, r.stderr  # 128 + SIGKILL, the root cause's
    cause = [ln[14:] for ln in r.stderr.splitlines() if ln.startswith("  cause     : ")]
    assert cause and cause[0].startswith(
        "the worker died of SIGKILL, which ddprun did not send, and the kernel's OOM killer "
        "killed 1 process(es) of the job's memory cgroup meanwhile; the memory cgroup "
        f"{memory_limited} has a limit of 200.0 MiB"), r.stderr
    assert "Slurm --mem" in r.stderr, r.stderr


def test_threads_refused_by_rlimit_nproc_are_explained_with_the_numbers(test_user, user_dir):
    binary, work = user_dir
    script = work / "threads.py"
    script.write_text((PROGRAMS / "threads.py").read_text())
    os.chmod(script, 0o644)
    # ddprun's own check wants 2 x 1 + 32 threads; the workers then start threads until refused.
    # The system Python: the test user may not reach the venv's.
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no /usr/bin/python3 for the test user")
    r = run_as_user(test_user, binary, work, (200, 200),
                    ["--nproc_per_node=2", "--threads_per_worker", "1", "--no_python",
                     "/usr/bin/python3", script])
    assert r.returncode == 1, (r.stdout, r.stderr)
    cause = [ln for ln in r.stderr.splitlines() if ln.startswith("  cause     : ")]
    assert cause and "could not start a thread or process (EAGAIN)" in cause[0], r.stderr
    assert "RLIMIT_NPROC of ddprun-test is soft 200, hard 200; ddprun-test runs " in cause[0], \
        cause[0]
    assert "ddprun-test hard nproc N' in /etc/security/limits.d/" in r.stderr, r.stderr


def test_an_exception_then_an_abort_on_the_way_out_names_the_exception(tmp_path):
    """PyTorch sometimes aborts a rank on its way out after the script raised (TEARDOWN_ABORT):
    the cause line said "crashed in native code" and blamed an extension (found by an attacking
    helper). Here the abort is made sure: an exit handler calls os.abort()."""
    script = tmp_path / "raise_then_abort.py"
    script.write_text(
        "import atexit, os\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "atexit.register(os.abort)\n"
        "@record\n"
        "def main():\n"
        "    raise RuntimeError('boom on rank ' + os.environ['RANK'])\n"
        "main()\n")
    r = run_ddprun(["--nproc_per_node=1", script])
    assert r.rc == 128 + signal.SIGABRT, r
    cause, fix = lines(r)
    assert cause.startswith("the worker raised RuntimeError: boom on rank 0, then aborted "
                            "(SIGABRT) on its way out"), cause
    assert "destroy_process_group() in a finally: block" in fix, fix


def test_a_rank_that_finished_early_is_named_as_the_cause_of_its_peers_failure():
    """Rank 1 runs 3 all-reduces, rank 0 six (a data-dependent loop): found by an attacking
    helper, the report said only "Connection closed by peer", or blamed an extension when the
    finished rank aborted on its way out (TEARDOWN_ABORT). Either way it now names the rank that
    finished first and the uneven steps."""
    r = diagnose("finishes_early.py")
    cause, fix = lines(r)
    if r.rc == 1:
        assert re.match(r'the worker lost its connection to a peer \("Connection (closed|reset) '
                        r'by peer"\) after rank 1 had finished \(exited 0, [\d.]+ s earlier\)',
                        cause), cause
    else:
        assert cause.startswith('the worker aborted (SIGABRT) as it exited ("terminate called '
                                'without an active exception"'), cause
        assert "it left the job first" in cause, cause
    assert "DistributedSampler with drop_last=True" in fix and "join()" in fix, fix


def test_a_rank_that_never_reached_init_process_group_is_named_by_the_one_that_waited():
    """Found while looking at Gloo set-up timeouts: the report's root cause was rank 0, which
    waited, with only "wait timeout after 3000ms, keys: /default_pg/0//cpu//0/1" to say that
    rank 1 never came. The cause line names rank 1 and says it was still running."""
    cause, fix = lines(diagnose("late_rank.py"))
    assert cause.startswith("the worker waited 3 s (init_process_group's timeout) for rank 1 to "
                            "set up the Gloo process group with it, and rank 1 never did"), cause
    assert cause.endswith("rank 1 was still running on this host when this worker gave up: its "
                          "output says where it was"), cause
    assert "before any slow or rank-dependent work" in fix, fix


@pytest.mark.parametrize("hang_detect", ["heartbeat", "torch"])
def test_a_gloo_collective_timeout_names_the_rank_that_never_entered_it(hang_detect):
    """Found comparing with C++ workers, whose flight recorders name the rank that never came: a
    PyTorch rank that timed out in a Gloo all_reduce was the root cause with only "Timed out
    waiting 3000ms for recv operation to complete". With the hook's record the cause names
    rank 1; without it, the cause says a rank stopped calling collectives and how to find it."""
    cause, fix = lines(diagnose("late_collective.py", args=[f"--hang_detect={hang_detect}"]))
    assert cause.startswith("the worker waited 3 s (the process group's timeout) in a Gloo "), cause
    if hang_detect == "torch":
        assert re.search(r"for a peer: rank 1 did not enter gloo:all_reduce #4 \(rank 0 waits in "
                         r"it\), as ddprun's PyTorch hook recorded: that rank is the cause", cause), cause
    else:
        assert "that never took part: a rank stopped calling collectives" in cause, cause
        assert fix.startswith("--hang_detect=torch names the rank"), fix

