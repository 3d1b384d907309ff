"""No orphan of any kind: every process a worker starts dies with the job, also when ddprun itself
is SIGKILLed; and ddprun never signals a process or group that is no longer its own.

The workers here detach in every way a training script's helpers do: a child in the worker's
process group, a child in a process group of its own, a double-forked daemon in a new session,
and a setsid'd child that forks again. Survivors are found by pid and start time (so a reused pid
is not mistaken for a survivor)."""

import os
import re
import shutil
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import BUILD, DDPRUN, PYTHON, base_env, run_ddprun

FORK_CHAIN = BUILD / "tests" / "fork_chain"
ROUNDS = int(os.environ.get("DDPRUN_ORPHAN_ROUNDS", "100"))

# Starts four descendants that detach differently, writes "pid starttime" of each to
# $PID_DIR/<rank>.<n>, then sleeps (or exits with $WORKER_EXIT when set).
WORKER = textwrap.dedent("""\
    import os, sys, time
    if sys.argv[1:2] == ["--bare"]:  # this script again, with an empty environment
        d, rank, bare_tag = sys.argv[2:5]
    else:
        d, rank, bare_tag = os.environ["PID_DIR"], os.environ["RANK"], None

    def note(tag):
        with open(f"/proc/{os.getpid()}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        path = f"{d}/{rank}.{tag}"
        with open(path + ".tmp", "w") as f:
            f.write(f"{os.getpid()} {start}")
        os.rename(path + ".tmp", path)

    def linger(tag):
        note(tag)
        while True:
            time.sleep(100)

    def bare(tag):  # no environment: no mark to be found by
        os.execve(sys.executable, [sys.executable, __file__, "--bare", d, rank, tag], {})

    if bare_tag:
        linger(bare_tag)
    if os.fork() == 0:            # same process group
        linger("group")
    if os.fork() == 0:            # a process group of its own
        os.setpgid(0, 0)
        linger("pgid")
    if os.fork() == 0:            # classic daemon: fork, setsid, fork
        os.setsid()
        if os.fork() == 0:
            linger("daemon")
        os._exit(0)
    if os.fork() == 0:            # setsid, then a grandchild in the new session
        os.setsid()
        if os.fork() == 0:
            linger("session-child")
        linger("session")
    if os.fork() == 0:            # the environment cleared
        bare("bare")
    if os.fork() == 0:            # the environment cleared, daemonized
        os.setsid()
        if os.fork() == 0:
            bare("bare-daemon")
        os._exit(0)
    note("worker")
    code = os.environ.get("WORKER_EXIT")
    if code is not None:
        while len([n for n in os.listdir(d) if n.startswith(rank + ".")
                   and not n.endswith(".tmp")]) < 8:
            time.sleep(0.01)
        sys.exit(int(code))
    while True:
        time.sleep(100)
    """)
TAGS = ["group", "pgid", "daemon", "session-child", "session", "bare", "bare-daemon", "worker"]
# Without a cgroup, what escapes ddprun's guardian when ddprun is SIGKILLed: a process that
# both cleared its environment and started a session of its own (containment.hpp).
ESCAPES_GUARDIAN_WITHOUT_CGROUP = ".bare-daemon"


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def survivors(pid_dir, spare=None):
    """What is still alive, but the names ending with `spare` (those allowed to escape)."""
    alive = []
    for name in os.listdir(pid_dir):
        if name.endswith(".tmp") or (spare and name.endswith(spare)):
            continue
        pid, start = (pid_dir / name).read_text().split()
        if start_time(int(pid)) == start:
            alive.append(f"{name} (pid {pid})")
    return alive


def wait_gone(pid_dir, timeout=10.0, spare=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = survivors(pid_dir, spare)
        if not left:
            return []
        time.sleep(0.02)
    return survivors(pid_dir, spare)


def kill_leftovers(pid_dir):
    for name in os.listdir(pid_dir):
        if name.endswith(".tmp"):
            continue
        pid, start = (pid_dir / name).read_text().split()
        if start_time(int(pid)) == start:
            os.kill(int(pid), signal.SIGKILL)


@pytest.fixture
def worker(tmp_path):
    path = tmp_path / "detaching_worker.py"
    path.write_text(WORKER)
    return path


def uses_cgroup(cgroup):
    """Whether ddprun contains a job in a cgroup of its own here with DDPRUN_CGROUP=`cgroup`."""
    r = run_ddprun(["--nproc_per_node=1", "--no_python", "true"],
                   env=base_env(LOGLEVEL="DEBUG", DDPRUN_CGROUP=cgroup))
    assert r.rc == 0, r
    return "contained by cgroup" in r.stderr


def start_job(pid_dir, worker, cgroup, early=False, nproc=2, launcher=(str(DDPRUN),)):
    """ddprun running `nproc` detaching workers, once every descendant is up (or, `early`, once
    the first is)."""
    env = base_env(PID_DIR=str(pid_dir), DDPRUN_CGROUP=cgroup)
    proc = subprocess.Popen([*launcher, f"--nproc_per_node={nproc}", "--no_python", PYTHON,
                             str(worker)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while len([n for n in os.listdir(pid_dir) if not n.endswith(".tmp")]) < nproc * len(TAGS):
        if early and os.listdir(pid_dir):
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            err = proc.communicate()[1].decode(errors="replace")
            kill_leftovers(pid_dir)
            pytest.fail(f"{pid_dir.name}: not all started: {sorted(os.listdir(pid_dir))}; "
                        f"ddprun rc {proc.returncode}\n{err}")
        time.sleep(0.005)
    return proc


def process_tree(root):
    """`root` and every process below it."""
    children = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def named(pid, word, full):
    """Whether pkill [-f] `word` would pick `pid`: its name, or (full) its command line."""
    try:
        with open(f"/proc/{pid}/" + ("cmdline" if full else "comm"), "rb") as f:
            return word.encode() in f.read()
    except OSError:
        return False


@pytest.mark.parametrize("full", [False, True], ids=["pkill", "pkill-f"])
@pytest.mark.parametrize("cgroup", ["1", "0"])
def test_pkill_9_of_the_job_by_name_leaves_no_process_behind(tmp_path, worker, cgroup, full):
    """`pkill -9 ddprun` and `pkill -9 -f ddprun`, as users kill a job, kept to this job's
    processes: every one whose name (command line) says ddprun is SIGKILLed at once, the
    launcher among them. The guardian's names do not say ddprun: it cleans up."""
    spare = None if uses_cgroup(cgroup) else ESCAPES_GUARDIAN_WITHOUT_CGROUP
    for i in range(5):
        pid_dir = tmp_path / f"round{i}"
        pid_dir.mkdir()
        proc = start_job(pid_dir, worker, cgroup)
        victims = [pid for pid in process_tree(proc.pid) if named(pid, "ddprun", full)]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        proc.wait()
        left = wait_gone(pid_dir, spare=spare)
        kill_leftovers(pid_dir)
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        assert proc.pid in victims
        assert not left, f"round {i}: left alive after pkill -9 killed {victims}: {left}\n{err}"
        if not full:  # (-f may pick every process of the job: a python of a venv named ddprun)
            assert "the launcher died without cleaning up: killed" in err, err


@pytest.mark.parametrize("cgroup", ["1", "0"])
def test_sigkilled_launcher_leaves_no_process_behind(tmp_path, worker, cgroup):
    """ROUNDS times: two workers each start six detaching descendants; ddprun is SIGKILLed at
    a random moment after they are all up (and, in a fifth of the rounds, while they start);
    every one of them must be gone within seconds (without a cgroup, all but the one that
    cleared its environment and started a session of its own: nothing can name it then)."""
    spare = None if uses_cgroup(cgroup) else ESCAPES_GUARDIAN_WITHOUT_CGROUP
    failures = []
    rng = __import__("random").Random(9)
    for i in range(ROUNDS):
        pid_dir = tmp_path / f"round{i}"
        pid_dir.mkdir()
        early = i % 5 == 4
        proc = start_job(pid_dir, worker, cgroup, early)
        time.sleep(rng.uniform(0, 0.05))
        proc.kill()
        proc.wait()
        if early:
            time.sleep(0.3)  # processes still starting when ddprun died: they must die too
        left = wait_gone(pid_dir, spare=spare)
        if left:
            failures.append(f"round {i}: {', '.join(left)}")
        kill_leftovers(pid_dir)
        proc.stderr.close()
    assert not failures, f"{len(failures)} of {ROUNDS} rounds left processes:\n" + "\n".join(
        failures[:10])


@pytest.mark.parametrize("cgroup", ["1", "0"])
def test_job_end_kills_every_descendant(tmp_path, worker, cgroup):
    """A job whose workers exit (here: one fails) ends with none of their descendants alive,
    however they detached; ddprun exits with the failure's code."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = base_env(PID_DIR=str(pid_dir), DDPRUN_CGROUP=cgroup, WORKER_EXIT="3")
    r = run_ddprun(["--nproc_per_node=2", "--no_python", PYTHON, str(worker)], env=env)
    left = survivors(pid_dir)
    kill_leftovers(pid_dir)
    assert r.rc == 3, r
    assert not left, f"left alive after ddprun exited: {left}\n{r}"


def beats_on(path, within=1.0):
    """Whether the fork chain still touches `path` (each generation lives only for a fork, too
    short for /proc to show it alive)."""
    before = path.stat().st_mtime_ns
    time.sleep(within)
    return path.stat().st_mtime_ns != before


@pytest.mark.parametrize("cgroup", ["1", "0"])
def test_a_daemon_that_forks_on_and_on_neither_stalls_the_job_nor_survives_it(tmp_path, cgroup):
    """Each worker leaves a daemon that ignores SIGTERM and forks a new generation as the old
    exits, each one an orphan that ddprun adopts and reaps. ddprun read the whole process table
    at each SIGCHLD, fell behind the storm and never saw its workers' exits: it sat 25 s,
    deaf to the SIGTERM of `timeout` (attack 111); and without a cgroup the chain outlived
    the job, found by no scan of /proc. Three runs: the job ends with its workers (about a
    second) and takes the chain with it."""
    for run in range(3):
        beat = tmp_path / f"beat_{run}"
        beat.touch()
        os.utime(beat, ns=(0, 0))
        # The chain ends by itself after 15 s, whatever happens here (one left running fills the
        # host's process table). ddprun in the caller's session, as under `timeout` in a shell.
        start = time.monotonic()
        r = subprocess.run([DDPRUN, "--nproc_per_node=2", "/bin/sh", "-c",
                            f"{FORK_CHAIN} {int(time.time()) + 15} {beat} & sleep 1; exit 0"],
                           env=base_env(DDPRUN_CGROUP=cgroup), stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           timeout=30)
        took = time.monotonic() - start
        assert r.returncode == 0, f"run {run}: {r.stderr}"
        assert took < 10, f"run {run}: the job took {took:.1f} s for a worker of 1 s\n{r.stderr}"
        assert beat.stat().st_mtime_ns > 0, f"run {run}: the chain never ran\n{r.stderr}"
        assert not beats_on(beat), f"run {run}: the chain survived the job\n{r.stderr}"


def test_containment_is_logged(tmp_path, worker):
    r = run_ddprun(["--nproc_per_node=1", "--no_python", "true"],
                   env=base_env(LOGLEVEL="DEBUG"))
    assert r.rc == 0, r
    assert "contained by" in r.stderr, r


PID_REUSE = textwrap.dedent("""\
    # Runs as pid 1 of a private pid namespace. ddprun runs two workers: one exits at once, the
    # other a second later. Meanwhile an unrelated process is started with the first worker's
    # pid (ns_last_pid) as the leader of its own group, if that pid is free. ddprun must not
    # kill it when the job ends.
    import os, subprocess, sys, time
    ddprun, python, d = sys.argv[1:4]
    worker = ("import os, sys, time\\n"
              "open(os.environ['D'] + '/' + os.environ['RANK'], 'w').write(str(os.getpid()))\\n"
              "time.sleep(0 if os.environ['RANK'] == '0' else 1.5)\\n")
    env = dict(os.environ, D=d)
    job = subprocess.Popen([ddprun, "--nproc_per_node=2", "--no_python", python, "-c", worker],
                           env=env)
    first = None
    while first is None:  # the file exists a moment before the pid is in it
        try:
            first = int(open(d + "/0").read())
        except (OSError, ValueError):
            time.sleep(0.005)
    while True:  # until worker 0 has exited (a zombie or gone)
        try:
            state = open(f"/proc/{first}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.005)
    time.sleep(0.2)
    env.pop("DDPRUN_PROCESS_TREE", None)
    bystander = None
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(first - 1))
        p = subprocess.Popen(["sleep", "30"], start_new_session=True, env=env)
        if p.pid == first:
            bystander = p
            break
        p.kill(); p.wait()
    rc = job.wait()
    if bystander is None:
        print("REUSE-IMPOSSIBLE")  # worker 0's pid was still held: nothing to kill by mistake
        sys.exit(0 if rc == 0 else 1)
    alive = bystander.poll() is None
    print("BYSTANDER-ALIVE" if alive else f"BYSTANDER-KILLED {bystander.returncode}")
    bystander.kill()
    sys.exit(0 if alive and rc == 0 else 1)
    """)


def test_reused_pid_is_never_signalled(tmp_path):
    """A worker's pid reused by an unrelated process (in a private pid namespace, where the
    next pid can be chosen): ddprun's end-of-job cleanup must not touch that process."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private pid namespace")
    script = tmp_path / "reuse.py"
    script.write_text(PID_REUSE)
    d = tmp_path / "pids"
    d.mkdir()
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", PYTHON, str(script),
                        str(DDPRUN), PYTHON, str(d)], env=base_env(), capture_output=True,
                       text=True, timeout=60)
    if "unshare failed" in r.stderr or "Operation not permitted" in r.stderr:
        pytest.skip(f"no private pid namespace here: {r.stderr.strip()}")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "BYSTANDER-KILLED" not in r.stdout, r.stdout


def test_through_the_dynamic_loader_the_guardian_still_guards(tmp_path, worker):
    """ddprun run through its dynamic loader (a way round a noexec mount), with options of the
    loader's, one of them naming ddprun's file as well; /proc/self/exe is the loader: the
    guardian starts the same way, its command line says nothing of ddprun, and when ddprun is
    SIGKILLed it kills what is left."""
    loaders = [p for p in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")
               if os.path.exists(p)]
    if not loaders:
        pytest.skip("no known dynamic loader path on this machine")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    proc = start_job(pid_dir, worker, "0",
                     launcher=(loaders[0], "--library-path", str(tmp_path),
                               "--argv0", str(DDPRUN), str(DDPRUN)))  # a value naming it too
    guardians = [pid for pid in process_tree(proc.pid) if named(pid, "job-guardian", False)]
    spared = [pid for pid in guardians if not named(pid, "ddprun", True)]
    proc.kill()
    proc.wait()
    left = wait_gone(pid_dir, spare=ESCAPES_GUARDIAN_WITHOUT_CGROUP)
    kill_leftovers(pid_dir)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert len(guardians) == 1, err
    assert spared == guardians, open(f"/proc/{guardians[0]}/cmdline", "rb").read()
    assert not left, f"left alive after ddprun was SIGKILLed: {left}\n{err}"
    assert "guardian process exited at start" not in err, err
    assert "[ddprun guardian] the launcher died without cleaning up" in err, err

@pytest.mark.parametrize("cgroup", ["1", "0"])
def test_a_guardian_that_dies_is_replaced_and_still_guards(tmp_path, worker, cgroup):
    """The guardian killed mid-run (the OOM killer, an admin) was left an unreaped zombie and
    not replaced: a later SIGKILL of ddprun left every detached descendant running (found by an
    attacking helper). ddprun starts another and tells it the workers."""
    spare = None if uses_cgroup(cgroup) else ESCAPES_GUARDIAN_WITHOUT_CGROUP
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    proc = start_job(pid_dir, worker, cgroup)
    first = [pid for pid in process_tree(proc.pid) if named(pid, "job-guardian", False)]
    assert len(first) == 1, first
    os.kill(first[0], signal.SIGKILL)
    deadline = time.monotonic() + 10
    second = []
    while not second and time.monotonic() < deadline:
        second = [pid for pid in process_tree(proc.pid)
                  if named(pid, "job-guardian", False) and pid != first[0]]
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    left = wait_gone(pid_dir, spare=spare)
    kill_leftovers(pid_dir)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert second, f"no new guardian\n{err}"
    assert re.search(rf"ddprun's guardian process \(pid {first[0]}\) died \(signal 9\): started "
                     rf"another \(pid {second[0]}\)", err), err
    assert not left, f"left alive after ddprun was SIGKILLed: {left}\n{err}"
