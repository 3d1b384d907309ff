"""Helpers for the --hang_detect=torch tests (test_pytorch_hang.py, test_pytorch_exit.py): a
2-rank PyTorch job under the built ddprun, and its output lines with the time each came."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from trainlib import DDPRUN

JOB = str(Path(__file__).parent / "pytorch_hang_job.py")
HANG_TIMEOUT = 3


def env():
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"  # py-spy
    return {**os.environ, "PYTHON_EXEC": sys.executable, "PATH": path}


def ddprun(tmp_path, *args, timeout=90):
    return subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                           f"--log_dir={tmp_path}", *args], env=env(), capture_output=True,
                          text=True, timeout=timeout)


def timed_lines(cmd, timeout=90):
    """Runs cmd with stdout and stderr merged; returns (rc, [(seconds since start, line)])."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in p.stdout:
            lines.append((time.monotonic() - start, line))
        return p.wait(timeout=timeout), lines
    finally:
        p.kill()
        p.wait()


def first(lines, pattern):
    return next((t for t, line in lines if re.search(pattern, line)), None)
