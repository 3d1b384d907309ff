"""Shared helpers for the end-to-end tests: they run the built ddprun as a user would.

Environment (set by CTest, see tests/CMakeLists.txt):
  DDPRUN         path of the ddprun binary
  DDPRUN_BUILD   the build directory (helper programs under tests/)
  DDPRUN_SOURCE  the source tree
"""

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("DDPRUN_SOURCE", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("DDPRUN_BUILD", SOURCE / "build"))
DDPRUN = Path(os.environ.get("DDPRUN", BUILD / "ddprun"))
FD_PROBE = BUILD / "tests" / "fd_probe"
PYTHON = sys.executable

# ddprun keeps the signals it inherited ignored (nohup: SIGHUP; a script's background job:
# SIGINT, SIGQUIT). The tests send them to ddprun as a terminal or a scheduler would, so a suite
# run under nohup or in the background gives ddprun (through this process) their defaults.
for _sig in (signal.SIGHUP, signal.SIGQUIT):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# ddprun keeps a failed run's logs under $TMPDIR, as a user wants them kept; the suite's many
# failing runs would leave some 1600 such directories in /tmp on every run. Each test module's
# runs get a TMPDIR of their own, removed when the module's process ends.
_TMPDIR = tempfile.mkdtemp(prefix="ddprun-e2e.")
os.chmod(_TMPDIR, 0o1777)  # as /tmp: some tests run ddprun as another user
os.environ["TMPDIR"] = _TMPDIR
tempfile.tempdir = None
atexit.register(shutil.rmtree, _TMPDIR, ignore_errors=True)

# Default deadline for one ddprun run; a hang fails the test instead of CTest's timeout.
RUN_TIMEOUT = 30.0


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    elapsed: float

    def __str__(self):
        return f"rc={self.rc} elapsed={self.elapsed:.2f}s\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(**overrides):
    """The test's environment for ddprun: PET_*, torchelastic knobs and SLURM_* (a suite run
    inside a Slurm job must not put every test in Slurm mode) removed, the venv
    python as PYTHON_EXEC, no visible GPU; overrides with a value of None are removed."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "TORCHELASTIC_", "TORCH_ELASTIC_", "SLURM_", "SLURMD_"))}
    env["PYTHON_EXEC"] = PYTHON
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = "1"
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_ddprun(args, env=None, timeout=RUN_TIMEOUT, cwd=None):
    """Runs ddprun ARGS to completion; returns Result. Kills it (and so its workers) on timeout."""
    start = time.monotonic()
    proc = subprocess.Popen([str(DDPRUN), *map(str, args)], env=env or base_env(), cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"ddprun {args} did not finish within {timeout}s\n{out}\n{err}")
    return Result(proc.returncode, out, err, time.monotonic() - start)


class Launched:
    """A ddprun started in the background; output goes to files under tmp_path."""

    def __init__(self, args, env, tmp_path, cwd=None):
        self.out_path = tmp_path / "ddprun.stdout"
        self.err_path = tmp_path / "ddprun.stderr"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([str(DDPRUN), *map(str, args)], env=env or base_env(),
                                         cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, start_new_session=True)
        self.exited_at = None

    @property
    def pid(self):
        return self.proc.pid

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=RUN_TIMEOUT):
        """Waits for ddprun to exit; returns its rc. Fails the test after timeout."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"ddprun did not exit within {timeout}s\n{self.output()}")
        if self.exited_at is None:
            self.exited_at = time.time()
        return rc

    def output(self):
        return (f"--- stdout\n{self.out_path.read_text(errors='replace')}\n"
                f"--- stderr\n{self.err_path.read_text(errors='replace')}")

    def stdout(self):
        return self.out_path.read_text(errors="replace")

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def tracked(make, end):
    """A factory fixture's body: yields start(...), which makes one with make(index, ...) and
    keeps it; end(each) at teardown."""
    made = []

    def start(*args, **kwargs):
        made.append(make(len(made), *args, **kwargs))
        return made[-1]

    yield start
    for thing in made:
        end(thing)


def launched(tmp_path, index, args, env=None, cwd=None):
    sub = tmp_path / f"launch{index}"
    sub.mkdir()
    return Launched(args, env, sub, cwd=cwd)


@pytest.fixture
def launch(tmp_path):
    """launch(args, env=None) starts ddprun in the background; every one is killed at teardown
    (its workers die with it through PR_SET_PDEATHSIG)."""
    yield from tracked(lambda i, *a, **kw: launched(tmp_path, i, *a, **kw), Launched.kill)


@pytest.fixture
def pid_reaper():
    """Collects worker pids a test saw; SIGKILLs any still alive at teardown."""
    pids = []
    yield pids
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_for(condition, timeout=10.0, interval=0.02, what="condition"):
    """Polls condition() until it returns a true value or the deadline passes (then fails)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_for_files(paths, timeout=10.0):
    """Waits until every path exists and is non-empty; returns their stripped contents."""
    paths = [Path(p) for p in paths]
    wait_for(lambda: all(p.exists() and p.stat().st_size > 0 for p in paths), timeout,
             what=f"files {[str(p) for p in paths]}")
    # A file can be non-empty but not yet complete; a pid line ends with a newline.
    wait_for(lambda: all(p.read_text().endswith("\n") for p in paths), timeout,
             what="complete lines in pid files")
    return [p.read_text().strip() for p in paths]


def freeze_job(launcher_pid, seconds, first=None):
    """Stops the launcher's children (its workers and job guardian), then the launcher, for
    `seconds`, as scontrol suspend or a cgroup freezer would; continues the launcher first, then
    the children: the order in which the launcher sees only beats from before the freeze.
    `first`: a child's pid to stop half a second before the rest (its peers then wait for it in
    a collective when the freeze comes)."""
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        children = [int(c) for c in f.read().split()]
    if first is not None:
        os.kill(first, signal.SIGSTOP)
        time.sleep(0.5)
    for pid in children:
        os.kill(pid, signal.SIGSTOP)
    os.kill(launcher_pid, signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(launcher_pid, signal.SIGCONT)
    time.sleep(0.3)
    for pid in children:
        os.kill(pid, signal.SIGCONT)


def pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def write_script(directory, name, text, executable=True):
    """Writes a worker program to directory/name; makes it executable unless told not to."""
    path = Path(directory) / name
    path.write_text(text)
    if executable:
        path.chmod(0o755)
    return path


def sh(script):
    """ddprun arguments that run a /bin/sh script directly (no python). Every $ is written $$:
    ddprun, as torchrun, turns $$ into $ (and $local_rank into the local rank) in arguments."""
    return ["--no_python", "/bin/sh", "-c", script.replace("$", "$$")]


def run_dir(log_dir):
    """The single <log_dir>/<run_id>_XXXXXX directory ddprun created (the run id is random
    unless --rdzv_id is given)."""
    runs = sorted(p for p in Path(log_dir).iterdir() if p.is_dir())
    assert len(runs) == 1, f"expected one run dir in {log_dir}, found {runs}"
    return runs[0]


# The store tests' servers and clients (test_store.py, test_store_hardening.py).


@pytest.fixture
def host_factory(tmp_path):
    """Starts ddprun's store server (tests/store_host; storelib.StoreHost); stopped at teardown."""
    from storelib import LOCAL, StoreHost

    def make(_, host=LOCAL, token=None, **limits):
        return StoreHost(tmp_path, host, token, **limits)

    yield from tracked(make, StoreHost.stop)


@pytest.fixture
def server(host_factory):
    """ddprun's store server on 127.0.0.1, no token."""
    return host_factory()


@pytest.fixture
def cli_factory(tmp_path):
    """Starts ddprun's store client (tests/store_cli; storelib.Cli); stopped at teardown."""
    from storelib import Cli
    yield from tracked(lambda _, port, token=None: Cli(tmp_path, port, token), Cli.stop)
