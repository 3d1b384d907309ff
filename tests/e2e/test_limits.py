"""Limits before spawning and `ddprun doctor`.

The RLIMIT_NPROC cases run ddprun as an unprivileged user (the kernel does not enforce
RLIMIT_NPROC for root): the test, running as root, creates the system user ddprun-test when
missing, sets the limits with prlimit and drops to that user with setpriv.
"""
import os
import pwd
import re
import resource
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import DDPRUN, base_env, free_port, run_ddprun

TEST_USER = "ddprun-test"
MARK_LINE = re.compile(r"^  (ok|warn|fail)\s+\S.*$", re.M)


def test_doctor_prints_a_marked_table_and_exits_zero():
    r = run_ddprun(["doctor"])
    assert r.rc == 0, r
    lines = MARK_LINE.findall(r.stdout)
    assert len(lines) >= 10, r
    assert "fail" not in lines, r
    for check in ("RLIMIT_NPROC (ulimit -u)", "RLIMIT_NOFILE (ulimit -n)",
                  "RLIMIT_MEMLOCK (ulimit -l)", "/dev/shm", "OMP_NUM_THREADS", "GPUs",
                  "visible GPUs", "NCCL", "OpenBLAS", "CUDA driver", "CUDA runtime", "memory", "interface lo",
                  "port 0", "port 29500", "port 29400"):
        assert re.search(r"^  (ok|warn|fail)\s+" + re.escape(check) + r"\s", r.stdout, re.M), \
            f"no line for {check}\n{r}"
    assert r.stdout.startswith("# ddprun doctor: host "), r
    assert re.search(r"^# \d+ ok, \d+ warn, 0 fail: OK$", r.stdout, re.M), r


def test_doctor_fails_a_master_port_held_where_this_node_hosts_the_store():
    """The doctor said OK (the port a mere warning) for a --master_port held by another process,
    where the job then fails at once: this node, node rank 0, hosts its store there (found by an
    attacking helper). Elsewhere a held port stays a warning."""
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        hosts = run_ddprun(["doctor", f"--master_port={port}"])
        other = run_ddprun(["doctor", "--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.1",
                            f"--master_port={port}"])
    assert hosts.rc == 1, hosts
    assert re.search(rf"^  fail\s+port {port}\s+cannot bind: Address already in use \(this "
                     rf"node's rendezvous store, --master_port\)", hosts.stdout, re.M), hosts
    assert re.search(rf"^  warn\s+port {port}\s+cannot bind", other.stdout, re.M), other


def test_a_static_rdzv_endpoint_s_port_is_the_one_checked_and_named():
    """Found by an attacking helper (attack 99): with a static job's --rdzv_endpoint (where its
    store is, as torchrun reads it) the doctor checked --master_port's default 29500 and said OK
    for an endpoint port held by another process; the launch then failed naming
    "--master_addr/--master_port", which the user never gave."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        doctor = run_ddprun(["doctor", f"--rdzv_endpoint=127.0.0.1:{port}"])
        launch = run_ddprun([f"--rdzv_endpoint=127.0.0.1:{port}", "--nnodes=1", "/bin/true"],
                            timeout=30)
    assert doctor.rc == 1, doctor
    assert re.search(rf"^  fail\s+port {port}\s+cannot bind: Address already in use \(this "
                     rf"node's rendezvous store, --rdzv_endpoint\)", doctor.stdout, re.M), doctor
    assert not re.search(r"^  \w+\s+port 29500\s", doctor.stdout, re.M), doctor
    assert launch.rc == 1, launch
    assert f"--rdzv_endpoint=127.0.0.1:{port}: store: listen on" in launch.stderr, launch
    assert "--master_addr/--master_port" not in launch.stderr, launch


def test_doctor_plans_the_cpu_binding_as_the_launch_does():
    """Found by an attacking helper (attack 99): the doctor took --numa_binding and --cpu_binding
    and checked nothing of them; a binding the launch refuses (more ranks than a NUMA node's
    cores under exclusive) was OK."""
    ranks = os.cpu_count() * 2 + 2
    refused = run_ddprun(["doctor", "--numa_binding=exclusive", f"--nproc_per_node={ranks}"])
    assert refused.rc == 1, refused
    assert re.search(r"^  fail\s+CPU binding\s+--numa_binding=exclusive: NUMA node \d+ has \d+ "
                     r"physical cores among the allowed CPUs for its \d+ local ranks",
                     refused.stdout, re.M), refused
    shared = run_ddprun(["doctor", "--cpu_binding=spread", f"--nproc_per_node={ranks}"])
    assert re.search(r"^  warn\s+CPU binding\s+--cpu_binding=spread: \d+ allowed CPU\(s\) .* "
                     r"ranks share CPUs", shared.stdout, re.M), shared
    fits = run_ddprun(["doctor", "--cpu_binding=compact", "--nproc_per_node=1"])
    assert re.search(r"^  ok\s+CPU binding\s+--cpu_binding=compact: local rank 0: ",
                     fits.stdout, re.M), fits
    assert "CPU binding" not in run_ddprun(["doctor"]).stdout


def test_doctor_checks_a_c10d_endpoint_s_port_and_that_this_node_would_host_it():
    """With a c10d --rdzv_endpoint the doctor checked the static defaults (29500, 29400) and
    warned that nothing listens at a free endpoint of this host, where this node's agent would
    host the store (found by an attacking helper)."""
    port = free_port()
    r = run_ddprun(["doctor", "--rdzv_backend=c10d", f"--rdzv_endpoint=localhost:{port}",
                    "--nnodes=2"])
    assert r.rc == 0, r
    assert re.search(rf"^  ok\s+port {port}\s+free \(c10d rendezvous --rdzv_endpoint port\)",
                     r.stdout, re.M), r
    assert not re.search(r"^  \w+\s+port 29[45]00\s", r.stdout, re.M), r
    assert re.search(rf"^  ok\s+rendezvous localhost:{port}\s+an address of this host, free: "
                     r"this node's ddprun would host the rendezvous store there", r.stdout, re.M), r


def test_doctor_names_openblas_kernels_older_than_the_cpu():
    with open("/proc/cpuinfo") as f:
        flags = set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
    if not {"avx2", "fma"} <= flags:
        pytest.skip("needs a CPU with AVX2 and FMA")
    old = run_ddprun(["doctor"], env=base_env(OPENBLAS_CORETYPE="Prescott"))
    if "libopenblas.so.0 is not on the library path" in old.stdout:
        pytest.skip("no system OpenBLAS")
    assert old.rc == 0, old
    assert re.search(r"^  warn\s+OpenBLAS\s+OpenBLAS \S+, Prescott kernels "
                     r"\(OPENBLAS_CORETYPE=Prescott; libopenblas\.so\.0\): no AVX2 on a CPU that "
                     r"has it\n\s+fix: export OPENBLAS_CORETYPE=(SkylakeX|Haswell) ", old.stdout,
                     re.M), old
    fit = run_ddprun(["doctor"], env=base_env(OPENBLAS_CORETYPE="Haswell"))
    assert re.search(r"^  ok\s+OpenBLAS\s+OpenBLAS \S+, Haswell kernels", fit.stdout, re.M), fit


def test_doctor_option_form_sizes_the_checks_by_the_options():
    r = run_ddprun(["--nproc_per_node=3", "--threads_per_worker", "10", "--doctor"])
    assert r.rc == 0, r
    assert "nproc_per_node 3, threads_per_worker 10" in r.stdout, r
    assert "3 workers x 10 threads" in r.stdout, r


def test_doctor_says_what_the_launch_would_warn_of_in_the_options():
    # It said nothing of them: a --rdzv_conf key mistyped, or given in a second --rdzv_conf
    # that replaced the first, was "27 ok" there and a warning only once the job ran.
    r = run_ddprun(["doctor", "--rdzv_conf=join_timout=30", "--rdzv_conf=read_timeout=5",
                    "--rdzv_conf=read_timeout=5", "--nproc_per_node=2"])
    assert r.rc == 0, r
    row = re.search(r"^  warn  options +(.*)$", r.stdout, re.M)
    assert row, r
    assert row[1] == ("--rdzv_conf was given twice: its last value (read_timeout=5) replaces the "
                      "first (join_timout=30), as under torchrun; to set several keys, give them "
                      "in one --rdzv_conf, comma-separated (join_timout=30,read_timeout=5)"), r
    clean = run_ddprun(["doctor", "--rdzv_conf=join_timout=30"])
    assert re.search(r"^  warn  options +--rdzv_conf join_timout=30 is not a key ddprun knows, "
                     r".*did you mean join_timeout\?", clean.stdout, re.M), clean
    assert re.search(r"^  ok    options +nothing to warn of$",
                     run_ddprun(["doctor"]).stdout, re.M)


def test_doctor_rejects_a_bad_option_with_usage_exit():
    r = run_ddprun(["doctor", "--threads_per_worker=none"])
    assert r.rc == 2, r
    assert "--threads_per_worker=none" in r.stderr, r


def test_doctor_checks_the_socket_interface_variables_against_the_interfaces():
    r = run_ddprun(["doctor"], env=base_env(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="=lo",
                                            NCCL_IB_HCA="mlx5_0"))
    assert r.rc == 0, r
    assert re.search(r"^  (ok|warn)\s+NCCL_IB_HCA=mlx5_0\s", r.stdout, re.M), r
    assert re.search(r"^  ok\s+GLOO_SOCKET_IFNAME=lo\s", r.stdout, re.M), r
    assert re.search(r"^  ok\s+NCCL_SOCKET_IFNAME==lo\s", r.stdout, re.M), r
    r = run_ddprun(["doctor"], env=base_env(GLOO_SOCKET_IFNAME="^lo",
                                            NCCL_SOCKET_IFNAME="ddp-nosuch"))
    assert r.rc == 1, r
    assert re.search(r"^  fail\s+GLOO_SOCKET_IFNAME=\^lo\s+\^lo is no interface name \(\^ and = "
                     r"are NCCL_SOCKET_IFNAME's syntax", r.stdout, re.M), r
    # base_env hides every GPU: the workers would use Gloo, and the job runs (attack 80).
    assert re.search(r"^  warn\s+NCCL_SOCKET_IFNAME=ddp-nosuch\s+no interface with an address "
                     r"starts with ddp-nosuch.*; no GPU is visible, so the workers use Gloo, "
                     r"not NCCL$", r.stdout, re.M), r
    assert "fix: set it to interfaces of this host with an address (lo 127.0.0.1" in r.stdout, r


def test_doctor_warns_about_omp_oversubscription():
    env = base_env(OMP_NUM_THREADS=str(os.cpu_count() * 4))
    r = run_ddprun(["doctor", "--nproc_per_node=2"], env=env)
    assert r.rc == 0, r
    assert re.search(r"^  warn\s+OMP_NUM_THREADS\s.*oversubscribed", r.stdout, re.M), r
    assert "fix: OMP_NUM_THREADS=" in r.stdout, r


# ---------------------------------------------------------------------------
# RLIMIT_NPROC as an unprivileged user.

def user_threads(uid):
    """Threads whose real uid is uid, as the kernel counts them against RLIMIT_NPROC."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid:
            total += int(fields["Threads"])
    return total


@pytest.fixture(scope="module")
def test_user():
    """(uid, gid) of ddprun-test, created when missing; skips unless the test runs as root."""
    if os.geteuid() != 0:
        pytest.skip("RLIMIT_NPROC cases need root: to create ddprun-test and set its limits "
                    "(root itself is exempt from RLIMIT_NPROC)")
    for tool in ("setpriv", "prlimit"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} (util-linux) is not installed")
    try:
        pw = pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", TEST_USER], check=True,
                       capture_output=True, timeout=30)
        pw = pwd.getpwnam(TEST_USER)
    return pw.pw_uid, pw.pw_gid


@pytest.fixture
def user_dir(test_user):
    """A world-traversable directory with a 0755 copy of ddprun (the build tree may not be
    readable by the test user) and a work directory the user owns."""
    uid, gid = test_user
    top = Path(tempfile.mkdtemp(prefix="ddprun-limits-"))
    top.chmod(0o755)
    binary = top / "ddprun"
    shutil.copy2(DDPRUN, binary)
    binary.chmod(0o755)
    work = top / "work"
    work.mkdir()
    os.chown(work, uid, gid)
    yield binary, work
    shutil.rmtree(top, ignore_errors=True)


def run_as_user(test_user, binary, work, nproc, args):
    """Runs binary ARGS as the test user with RLIMIT_NPROC set to nproc=(soft, hard)."""
    uid, gid = test_user
    cmd = ["prlimit", f"--nproc={nproc[0]}:{nproc[1]}", "setpriv", f"--reuid={uid}",
           f"--regid={gid}", "--init-groups", str(binary), *map(str, args)]
    env = base_env(TMPDIR=str(work), HOME=str(work))
    return subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=60)


def test_a_low_soft_nproc_under_a_high_hard_one_is_raised_and_the_job_runs(test_user, user_dir):
    binary, work = user_dir
    soft = user_threads(test_user[0]) + 10
    # Raising a hard limit needs CAP_SYS_RESOURCE, which a container's root may lack.
    hard = min(resource.getrlimit(resource.RLIMIT_NPROC)[1] & 0xFFFFFFFFFFFFFFFF, 100000)
    if hard < soft + 2 * 64 + 32:
        pytest.skip(f"this process's hard RLIMIT_NPROC ({hard}) leaves no room to raise into")
    r = run_as_user(test_user, binary, work, (soft, hard),
                    ["--nproc_per_node=2", "--threads_per_worker", "64", "/bin/true"])
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert re.search(rf"raised RLIMIT_NPROC \(ulimit -u\) soft limit from {soft} to {hard}",
                     r.stderr), r.stderr


def test_a_low_hard_nproc_fails_before_spawning_with_the_numbers_and_the_fix(test_user,
                                                                             user_dir):
    binary, work = user_dir
    marker = work / "worker-ran"
    r = run_as_user(test_user, binary, work, (50, 50),
                    ["--nproc_per_node=2", "--threads_per_worker", "64", "--no_python",
                     "/bin/sh", "-c", f"touch {marker}"])
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert not marker.exists(), "a worker started despite the failed limit check"
    err = r.stderr
    assert "RLIMIT_NPROC (ulimit -u) is too low" in err, err
    assert "soft 50, hard 50" in err, err
    assert f"threads of {TEST_USER}" in err, err
    assert "needed about 160 (2 workers x 64 threads + 32)" in err, err
    assert f"top thread holders of {TEST_USER}:" in err, err
    assert "ulimit -u " in err and "/etc/security/limits.d/" in err, err
    assert f"{TEST_USER} hard nproc " in err, err


def test_a_restart_that_cannot_start_is_not_blamed_on_the_previous_attempt(test_user, user_dir):
    # Attack 75: attempt 0's rank 1 failed, the restart could not start a thread (the user's
    # threads all taken meanwhile), and the FAILED block named attempt 0's failure as the root
    # cause of a job that ended for another reason.
    binary, work = user_dir
    worker = work / "worker.sh"
    worker.write_text('#!/bin/sh\nif [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; '
                      'then sleep 2; echo "rank 1 fails on purpose" >&2; exit 3; fi\nsleep 5\n')
    worker.chmod(0o755)
    hog = work / "hog.py"  # from 1 s on it takes every thread the user may start, for 12 s
    hog.write_text("import threading, time\nend = time.time() + 12\nwhile time.time() < end:\n"
                   "    try:\n        threading.Thread(target=time.sleep, args=(max(0.1, end - "
                   "time.time()),), daemon=True).start()\n    except RuntimeError:\n"
                   "        time.sleep(0.002)\n")
    uid, gid = test_user
    limit = user_threads(uid) + 60
    script = (f"(sleep 1; exec python3 {hog}) & exec {binary} --nproc_per_node=2 "
              f"--max_restarts=1 --threads_per_worker=4 --no_python {worker}")
    cmd = ["prlimit", f"--nproc={limit}:{limit}", "setpriv", f"--reuid={uid}", f"--regid={gid}",
           "--init-groups", "/bin/sh", "-c", script]
    r = subprocess.run(cmd, env=base_env(TMPDIR=str(work), HOME=str(work)), cwd=work,
                       capture_output=True, text=True, timeout=60)
    err = r.stderr
    assert re.search(r"restarting the workers of every node after a failure \(round 0 ended: "
                     r"failure on node 0 .*\): restart 1 of 1", err), err
    if r.returncode == 0:
        pytest.skip("the thread hog did not take the threads the first attempt freed in time")
    assert "Resource temporarily unavailable" in err or "EAGAIN" in err, err
    after = err[err.index("restarting the workers of every node"):]
    if "Root Cause" in after:  # the restart's own start failure, not attempt 0's
        assert "rank 1 fails on purpose" not in after[after.index("Root Cause"):], err
        assert "could not be started" in after or "fork failed with EAGAIN" in after, err


def test_doctor_marks_a_low_hard_nproc_as_fail_and_exits_one(test_user, user_dir):
    binary, work = user_dir
    r = run_as_user(test_user, binary, work, (50, 50), ["doctor", "--nproc_per_node=2"])
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert re.search(r"^  fail\s+RLIMIT_NPROC \(ulimit -u\)\s+soft 50, hard 50", r.stdout,
                     re.M), r.stdout
    assert re.search(r"^\s+fix: .*ulimit -u \d+", r.stdout, re.M), r.stdout
    assert r.stdout.rstrip().endswith("FAILED"), r.stdout


def pids_cgroup_root():
    """Where a pids cgroup can be made here: the v1 hierarchy, or v2 with the controller."""
    if os.geteuid() != 0:
        return None
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists():
        return v1
    v2 = Path("/sys/fs/cgroup")
    control = v2 / "cgroup.subtree_control"
    if control.exists() and "pids" in control.read_text().split():
        return v2
    return None


def in_a_pids_cgroup(args):
    """`ddprun ARGS` run in a pids cgroup of its own with pids.max 20 (skips where none can be
    made): the finished process and the cgroup's path (removed by then)."""
    root = pids_cgroup_root()
    if root is None:
        pytest.skip("needs root and a writable pids cgroup (v1 hierarchy, or v2 with pids)")
    cg = root / f"ddprun_test_{os.getpid()}"
    try:
        cg.mkdir()
        (cg / "pids.max").write_text("20\n")
        r = subprocess.run(["sh", "-c", f"echo $$ > {cg}/cgroup.procs && exec '{DDPRUN}' {args}"],
                           capture_output=True, text=True, env=base_env(), timeout=60)
    except OSError as e:
        pytest.skip(f"cannot make a pids cgroup here: {e}")
    finally:
        if cg.exists():
            cg.rmdir()
    return r, cg


def test_a_cgroup_pids_max_below_the_jobs_threads_is_named():
    """docker --pids-limit, a pod's pid limit, TasksMax: counted for root too, never lifted by
    ulimit. The doctor and the check before spawning name it (they said nothing: found by an
    attacking helper)."""
    r, cg = in_a_pids_cgroup("doctor --nproc_per_node=2 --threads_per_worker=30")
    assert re.search(rf"warn  cgroup pids\.max\s+20 in {cg}, \d+ in use, the job needs about 92",
                     r.stdout), r.stdout
    assert "--pids-limit" in r.stdout, r.stdout


def test_a_worker_the_cgroups_pids_max_refuses_is_blamed_on_it_not_on_ulimit():
    """Root, 32 workers in a cgroup of pids.max 20: the start error blamed RLIMIT_NPROC (ulimit
    -u), which root does not have and which would not help (found by an attacking helper)."""
    r, cg = in_a_pids_cgroup("--nproc_per_node=32 --no_python /bin/sleep 1")
    assert r.returncode == 1, r.stderr
    assert "could not be started: start /bin/sleep: fork failed with EAGAIN" in r.stderr, r.stderr
    assert re.search(rf"cause     : a worker could not start a thread or process \(EAGAIN\): the "
                     rf"cgroup's pids\.max \(20 in {cg}, \d+ in use now\) counts every thread of "
                     rf"the job, root's too\n", r.stderr), r.stderr


def test_a_small_soft_stack_limit_is_raised_for_the_workers():
    """ulimit -Ss 64: the workers inherited 64 KiB and `import torch` died of SIGSEGV without a
    word (found by an attacking helper). The soft limit is raised to 8 MiB, said once."""
    def small_stack():
        hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        resource.setrlimit(resource.RLIMIT_STACK, (64 * 1024, hard))

    r = subprocess.run([str(DDPRUN), "--nproc_per_node=1", "--no_python", "/bin/sh", "-c",
                        "echo stack=$(ulimit -s)"], env=base_env(), capture_output=True,
                       text=True, timeout=60, preexec_fn=small_stack)
    assert r.returncode == 0, r.stderr
    assert "stack=8192" in r.stdout, r.stdout
    assert "raised RLIMIT_STACK (ulimit -s) soft limit from 64.0 KiB to 8.0 MiB" in r.stderr, \
        r.stderr


def with_nofile(n):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return set_limit


def test_a_hard_nofile_that_fits_the_launcher_runs_the_job_with_a_warning():
    """ulimit -n 40 refused a 1-worker job (48 + 8 a worker + those open) that runs in it, as
    torchrun's does (attack 80). Refused below what the launcher holds; a warning below the
    room a hang dump wants."""
    args = [str(DDPRUN), "--nproc_per_node=1", "--no_python", "/bin/sh", "-c", "echo ran"]
    r = subprocess.run(args, env=base_env(), capture_output=True, text=True, timeout=60,
                       preexec_fn=with_nofile(40))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran\n", r.stdout
    assert re.search(r"warning\] RLIMIT_NOFILE \(ulimit -n\): soft 40, hard 40; \d+ open at "
                     r"start, the launcher needs at least \d+ .*: a hang dump", r.stderr), r.stderr
    r = subprocess.run(args, env=base_env(), capture_output=True, text=True, timeout=60,
                       preexec_fn=with_nofile(24))
    assert r.returncode == 1, r.stderr
    assert r.stdout == "", r.stdout
    assert "RLIMIT_NOFILE (ulimit -n) is too low to run the job: hard limit 24 open files" in \
        r.stderr, r.stderr


def test_doctor_warns_of_a_dev_shm_too_small_for_dataloader_batches():
    """A 2 MiB /dev/shm was "ok" where no GPU is visible; a DataLoader job then failed at its
    first batch (attack 80). ddprun doctor runs in a mount namespace with that /dev/shm."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private /dev/shm")
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=2M tmpfs /dev/shm "
                        f"&& exec {DDPRUN} doctor --nproc_per_node 2"], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    if "unshare" in r.stderr and "Operation not permitted" in r.stderr:
        pytest.skip(f"no mount namespace here: {r.stderr.strip()}")
    row = next(line for line in r.stdout.splitlines() if "/dev/shm" in line)
    assert re.match(r"^  warn\s+/dev/shm\s+2 MiB free", row), r.stdout
    assert "DataLoader workers (num_workers > 0) hand each batch over through /dev/shm" in row, row


def test_a_crash_under_a_hard_stack_limit_too_small_names_the_limit(tmp_path):
    """ulimit -s 64 (hard): import torch dies of SIGSEGV; the report blamed an extension, the
    limit unnamed (attack 80)."""
    def tiny_stack():
        resource.setrlimit(resource.RLIMIT_STACK, (64 * 1024, 64 * 1024))

    script = tmp_path / "imp.py"
    script.write_text("import torch\n")
    r = subprocess.run([str(DDPRUN), "--nproc_per_node=1", str(script)], env=base_env(),
                       capture_output=True, text=True, timeout=60, preexec_fn=tiny_stack)
    if r.returncode == 0:
        pytest.skip("import torch did not crash under a 64 KiB stack here")
    assert r.returncode == 128 + 11, r.stderr
    cause = next(ln for ln in r.stderr.splitlines() if ln.startswith("  cause     : "))
    assert "its stack limit is only 64.0 KiB (RLIMIT_STACK, ulimit -s: soft 64.0 KiB, hard " \
        "64.0 KiB)" in cause, cause


def test_doctor_fails_a_store_address_this_node_cannot_host_or_resolve():
    """Doctor said OK to --master_addr/--rdzv_endpoint hosts that the launch could not resolve
    or bind, for a single node (attack 80)."""
    port = free_port()
    r = run_ddprun(["doctor", "--master_addr", "198.51.100.7", "--master_port", str(port)])
    assert r.rc == 1, r
    assert re.search(rf"^  fail\s+rendezvous 198\.51\.100\.7:{port}\s+this node would host the "
                     r"rendezvous store there and cannot: bind: Cannot assign requested address",
                     r.stdout, re.M), r
    assert "fix: give --master_addr a name or address of this host" in r.stdout, r
    r = run_ddprun(["doctor", "--rdzv_backend=c10d",
                    f"--rdzv_endpoint=no-such-host.invalid:{port}"])
    assert r.rc == 1, r
    assert re.search(rf"^  fail\s+rendezvous no-such-host\.invalid:{port}\s+cannot reach: resolve "
                     r"no-such-host\.invalid", r.stdout, re.M), r
    # Without --master_port a single node's store is on localhost at a free port, as under
    # torchrun: the address is not used, and said so (attack 108: OK without a word).
    r = run_ddprun(["doctor", "--master_addr", "no-such-host.invalid"])
    assert r.rc == 0, r
    assert re.search(r"^  warn\s+options\s+--master_addr=no-such-host\.invalid has no effect in a "
                     r"single-node job without --master_port", r.stdout, re.M), r
    r = run_ddprun(["doctor", "--master_addr", "localhost", "--master_port", str(port)])
    assert r.rc == 0, r
    assert re.search(rf"^  ok\s+rendezvous localhost:{port}\s+an address of this host, free",
                     r.stdout, re.M), r


@pytest.mark.parametrize("args", [["doctor", "--help"], ["doctor", "-h"], ["--doctor", "--help"],
                                  ["--help", "--doctor"], ["doctor", "--json", "--help"]])
def test_help_wins_over_the_doctor(args):
    """They ran the checks and exited 0, printing no usage (attack 86)."""
    r = run_ddprun(args)
    assert r.rc == 0, r
    assert r.stdout.startswith("usage: ddprun"), r
    version = run_ddprun(["--doctor", "--version"])
    assert re.fullmatch(r"ddprun \d+\.\d+\.\d+\n", version.stdout), version


@pytest.mark.parametrize("sub", ["doctor", "dump"])
def test_a_subcommand_after_options_is_named_as_one(sub):
    """`ddprun --nproc_per_node 2 doctor` said only "doctor: not found on PATH" (attack 99)."""
    r = run_ddprun(["--nproc_per_node=2", sub])
    assert r.rc == 127, r
    assert f"; ddprun's {sub} is a subcommand, read only as the first argument: ddprun {sub}" \
        in r.stderr, r


def test_doctor_json_with_a_value_says_it_takes_none():
    """It said "unknown option --json: did you mean --nnodes?" (attack 99)."""
    r = run_ddprun(["doctor", "--json=1"])
    assert r.rc == 2, r
    assert "--json=1: --json takes no value" in r.stderr, r
    assert "unknown option" not in r.stderr, r


def test_doctor_checks_the_program_it_is_given(tmp_path):
    """`ddprun doctor json` (meant --json) said OK without a word about `json` (attack 86): a
    program given is resolved as the launch would, and fails the doctor where it would."""
    r = run_ddprun(["doctor", "json"])
    assert r.rc == 1, r
    assert re.search(r"^  fail\s+program\s+cannot run json: json: not found on PATH", r.stdout,
                     re.M), r
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    r = run_ddprun(["--doctor", "--nproc_per_node=2", str(script), "--lr", "0.1"])
    assert r.rc == 0, r
    assert re.search(rf"^  ok\s+program\s+each worker runs \S*python\S* -u {re.escape(str(script))} "
                     r"--lr 0\.1 \(python from ", r.stdout, re.M), r
    assert "program" not in run_ddprun(["doctor"]).stdout  # none given: nothing said


def test_doctor_tries_the_log_directory_as_the_launch_would(tmp_path):
    """A --log_dir that is a file fails every launch at once; the doctor said OK (attack 86).
    A TMPDIR that does not exist falls back to /tmp (attack 115), as the launch does. Nothing it
    tries is left behind."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    r = run_ddprun(["doctor", f"--log_dir={a_file}"])
    assert r.rc == 1, r
    assert re.search(rf"^  fail\s+log directory\s+--log_dir {re.escape(str(a_file))}: Not a "
                     r"directory", r.stdout, re.M), r
    r = run_ddprun(["doctor"], env=base_env(TMPDIR=str(tmp_path / "missing")))
    assert re.search(r"^  ok\s+log directory\s+a temporary directory in /tmp is writable",
                     r.stdout, re.M), r
    assert re.search(r"^  warn\s+options\s+.*TMPDIR=\S+/missing is no writable directory",
                     r.stdout, re.M), r
    later = tmp_path / "logs" / "run"
    r = run_ddprun(["doctor", f"--log_dir={later}"], env=base_env(TMPDIR=str(tmp_path)))
    assert r.rc == 0, r
    assert re.search(rf"^  ok\s+log directory\s+--log_dir {re.escape(str(later))} can be made "
                     r"\(tried, and removed\); \S+ \S+ free there", r.stdout, re.M), r
    # Permission bits do not tell: /proc refuses root too (attack 88).
    r = run_ddprun(["doctor", "--log_dir=/proc/ddprun_doctor_test"])
    assert r.rc == 1, r
    assert re.search(r"^  fail\s+log directory\s+--log_dir /proc/ddprun_doctor_test cannot be "
                     r"made: ", r.stdout, re.M), r
    kept = tmp_path / "kept"
    kept.mkdir()
    r = run_ddprun(["doctor", f"--log_dir={kept}"], env=base_env(TMPDIR=str(tmp_path)))
    assert re.search(r"^  ok\s+log directory\s+--log_dir \S+ is writable", r.stdout, re.M), r
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "kept"], r
    assert list(kept.iterdir()) == [], r
