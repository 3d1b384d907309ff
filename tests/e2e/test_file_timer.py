"""torch's file timer (TORCHELASTIC_ENABLE_FILE_TIMER=1): real PyTorch workers arm timers with
torch.distributed.elastic.timer.FileTimerClient; ddprun serves the named pipe, kills a worker
whose timer expired and names the scope as the root cause, as torchrun's agent does."""
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import DDPRUN, base_env, freeze_job, pid_alive, run_ddprun, write_script

torch = pytest.importorskip("torch")

WORKER = r"""
import json, os, signal, sys, time
mode = sys.argv[1]
rank = int(os.environ["RANK"])
path = os.environ.get("TORCHELASTIC_TIMER_FILE")


def say(line):  # one write: print() under python -u writes the newline apart
    os.write(1, (line + "\n").encode())


say(f"rank {rank} timer_file={path}")
if mode == "env":
    sys.exit(0)
from torch.distributed.elastic import timer
timer.configure(timer.FileTimerClient(path))
if mode == "ok":
    # Garbage and a request for a pid that is not the job's must change nothing.
    with open(path, "w") as pipe:
        pipe.write("not json\n")
    foreign = timer.FileTimerRequest(int(sys.argv[2]), "foreign", time.time() - 1, signal.SIGKILL)
    with open(path, "w") as pipe:
        pipe.write(foreign.to_json() + "\n")
    with timer.expires(after=5, scope="quick"):
        time.sleep(0.3)
    time.sleep(0.5)  # the foreign timer expired on arrival: it is handled by now
    say(f"rank {rank} done")
elif mode == "released":
    with timer.expires(after=2, scope="step"):
        say(f"rank {rank} acquired")
        time.sleep(0.8)
    say(f"rank {rank} released")
    time.sleep(0.5)
elif mode == "overrun":
    if rank == 1:
        say(f"acquire at {time.time()}")
        with timer.expires(after=1, scope="slow_step"):
            time.sleep(60)
    else:
        time.sleep(60)
"""


def worker(tmp_path):
    return write_script(tmp_path, "timer_worker.py", WORKER, executable=False)


def env(tmp_path, **extra):
    return base_env(TMPDIR=str(tmp_path), **extra)


def timer_files(out):
    return set(re.findall(r"timer_file=(\S+)", out))


def test_a_block_that_finishes_in_time_succeeds(tmp_path):
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        r = run_ddprun(["--nproc_per_node=2", worker(tmp_path), "ok", bystander.pid],
                       env=env(tmp_path, TORCHELASTIC_ENABLE_FILE_TIMER="1"), timeout=25)
        assert r.rc == 0, r
        assert pid_alive(bystander.pid), "a pid that is not the job's was signalled"
    finally:
        bystander.kill()
        bystander.wait()
    assert r.stdout.count("done") == 2, r
    (path,) = timer_files(r.stdout)
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/watchdog_timer_[0-9a-f-]{36}", path), path
    assert not os.path.exists(path), "the named pipe outlived ddprun"
    assert r.stderr.count("malformed request") == 1, r  # two ranks wrote one each: one warning
    assert re.search(r"pid \d+: file timer 'foreign' expired .* not signalled", r.stderr), r


def test_an_overrun_block_kills_its_worker_and_names_the_scope(tmp_path):
    pipe = tmp_path / "my_timer_pipe"
    r = run_ddprun(["--nproc_per_node=2", "--shutdown_timeout=2", worker(tmp_path), "overrun"],
                   env=env(tmp_path, TORCHELASTIC_ENABLE_FILE_TIMER="1",
                           TORCHELASTIC_TIMER_FILE=str(pipe)), timeout=25)
    ended = time.time()
    assert r.rc == 128 + signal.SIGKILL, r
    assert timer_files(r.stdout) == {str(pipe)}
    assert not pipe.exists()
    acquired = float(re.search(r"acquire at (\S+)", r.stdout).group(1))
    # Killed at the 1 s expiry; the other rank dies of its SIGTERM at once.
    assert ended - acquired < 1 + 1.5, r
    root = r.stderr.split("Root Cause (first observed failure):", 1)[1]
    assert "rank      : 1 (local_rank: 1)" in root, r
    assert "exitcode  : -9" in root, r
    assert re.search(r"file timer 'slow_step' expired after 1\.\d s \(limit 1\.\d s; "
                     r"TORCHELASTIC_ENABLE_FILE_TIMER\): SIGKILL sent to it", root), r
    assert "<NO_OTHER_FAILURES>" in r.stderr, r  # rank 0 was stopped, not failed
    assert re.search(r"rank 0 \(local_rank 0, pid \d+\) stopped by ddprun", r.stderr), r


@pytest.mark.parametrize("paused", ["launcher", "whole_job"])
def test_a_timer_held_across_a_pause_does_not_expire(tmp_path, paused):
    """launcher: ddprun stopped across the workers' releases (in the pipe), the 2 s expiry and
    their exits; resumed, it must read the releases before it acts on the expired timers.
    whole_job: frozen whole (scontrol suspend, a cgroup freezer) with both timers held, the 2 s
    pass while nobody runs; continued, that time does not count and both release in time."""
    p = subprocess.Popen([str(DDPRUN), "--nproc_per_node=2", "--shutdown_timeout=2",
                          worker(tmp_path), "released"],
                         env=env(tmp_path, TORCHELASTIC_ENABLE_FILE_TIMER="1"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Read from the descriptor, not the buffered file: communicate() below reads the
        # descriptor too, and would miss lines a buffered read had taken ahead (a slow test
        # process reads "released" with the "acquired" lines).
        seen = ""
        while seen.count("acquired") < 2:
            chunk = os.read(p.stdout.fileno(), 65536).decode()
            assert chunk, f"ddprun ended before both ranks acquired: {seen}"
            seen += chunk
        if paused == "launcher":
            p.send_signal(signal.SIGSTOP)
            time.sleep(3.5)  # both release at 0.8 s; the timers' 2 s pass
            p.send_signal(signal.SIGCONT)
        else:
            freeze_job(p.pid, 3.5)
        out, err = p.communicate(timeout=30)
        out = seen + out
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert sorted(re.findall(r"^rank (\d) released$", out, re.M)) == ["0", "1"], out
    assert "expired" not in err, err
    assert "ddprun itself did not run for" in err, err


def test_a_path_that_is_not_a_pipe_is_refused(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    r = run_ddprun(["--nproc_per_node=1", worker(tmp_path), "env"],
                   env=env(tmp_path, TORCHELASTIC_ENABLE_FILE_TIMER="1",
                           TORCHELASTIC_TIMER_FILE=str(taken)), timeout=10)
    assert r.rc == 2, r
    assert "is not a named pipe" in r.stderr and "TORCHELASTIC_TIMER_FILE" in r.stderr, r
    assert taken.read_text() == "keep me"


@pytest.mark.parametrize("value", [None, "0", "true"])
def test_without_enable_no_timer_file_is_set(tmp_path, value):
    r = run_ddprun(["--nproc_per_node=1", worker(tmp_path), "env"],
                   env=env(tmp_path, TORCHELASTIC_ENABLE_FILE_TIMER=value), timeout=10)
    assert r.rc == 0, r
    assert timer_files(r.stdout) == {"None"}, r
    assert not list(tmp_path.glob("watchdog_timer_*"))


def test_the_pipe_is_private_to_the_user(tmp_path):
    # The worker looks at the pipe while ddprun serves it.
    script = write_script(tmp_path, "mode.py", "import os, stat\n"
                          "st = os.stat(os.environ['TORCHELASTIC_TIMER_FILE'])\n"
                          "print('fifo', stat.S_ISFIFO(st.st_mode), oct(st.st_mode & 0o777))\n",
                          executable=False)
    r = run_ddprun(["--nproc_per_node=1", script],
                   env=env(tmp_path, TORCHELASTIC_ENABLE_FILE_TIMER="1"), timeout=10)
    assert r.rc == 0, r
    assert "fifo True 0o600" in r.stdout, r
