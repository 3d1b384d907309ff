"""--hang_detect=torch: an unmodified PyTorch DDP job (Gloo, CPU) whose rank 1 stops before an
all_reduce is named within --hang_timeout of its last collective, with both ranks' Python stacks
and PyTorch's flight recorder; a slow but progressing job is not hung; the hook is off by default."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainlib import DDPRUN

pytest.importorskip("torch")
JOB = str(Path(__file__).parent / "pytorch_hang_job.py")
HANG_TIMEOUT = 3


def env():
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"  # py-spy
    return {**os.environ, "PYTHON_EXEC": sys.executable, "PATH": path}


def ddprun(tmp_path, *args, timeout=90):
    return subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                           f"--log_dir={tmp_path}", *args], env=env(), capture_output=True,
                          text=True, timeout=timeout)


def test_rank_that_stopped_calling_all_reduce_is_named(tmp_path):
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", JOB,
               "--hang-step", "20", "--step-sleep", "0.02")
    assert r.returncode == 124, r.stderr
    assert re.search(r"rank 1 did not enter gloo:all_reduce #\d+", r.stderr), r.stderr
    assert re.search(r"rank 0 waits in gloo:all_reduce #\d+", r.stderr), r.stderr
    dumps = next(Path(tmp_path).glob("*/attempt_0/dumps"))
    torch_dir = dumps / "torch"
    # Detection time: from the last progress (the newest progress file) to the summary.
    last = max(p.stat().st_mtime for p in torch_dir.glob("progress_*"))
    detected = (dumps / "summary.txt").stat().st_mtime
    print(f"detected {detected - last:.1f} s after the last collective "
          f"(--hang_timeout={HANG_TIMEOUT})")
    assert detected - last <= HANG_TIMEOUT + 4 + 5  # + the flight recorder wait, loaded machine
    assert "no PyTorch dump pipe" in r.stderr
    assert (torch_dir / "nccl_trace_rank_0").is_file() and (torch_dir / "nccl_trace_rank_1").is_file()
    rank1 = (dumps / "rank_1.txt").read_text()
    if (Path(sys.executable).parent / "py-spy").exists():
        assert re.search(r"stuck_before_all_reduce \(.*pytorch_hang_job.py:\d+\)", rank1), rank1
        assert "pytorch_hang_job.py" in (dumps / "rank_0.txt").read_text()


def test_slow_but_progressing_job_is_not_hung(tmp_path):
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", JOB,
               "--steps", "8", "--step-sleep", "1.0")
    assert r.returncode == 0, r.stderr


def test_hook_off_by_default(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import os\nprint('PP=' + os.environ.get('PYTHONPATH', ''), "
                      "'FR=' + os.environ.get('TORCH_FR_BUFFER_SIZE', ''), flush=True)\n")
    r = ddprun(tmp_path / "logs", str(script))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(f"PP={os.environ.get('PYTHONPATH', '')} FR=") == 2, r.stdout
