"""--hang_detect=torch: an unmodified PyTorch DDP job (Gloo, CPU) whose rank 1 stops before an
all_reduce is named within --hang_timeout of its last collective, with both ranks' Python stacks
and PyTorch's flight recorder; a slow but progressing job is not hung. A rank's life as the hook
sees it (finishing, hung at exit, wrappers, helpers, DataLoader workers): test_pytorch_exit.py."""
import importlib.util
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hanglib import DDPRUN, HANG_TIMEOUT, JOB, ddprun, env, first, timed_lines

pytest.importorskip("torch")


def test_rank_that_stopped_calling_all_reduce_is_named(tmp_path):
    rc, lines = timed_lines([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                             f"--log_dir={tmp_path}", f"--hang_timeout={HANG_TIMEOUT}",
                             "--hang_detect=torch", JOB, "--hang-step", "20", "--step-sleep", "0.02"])
    out = "".join(line for _, line in lines)
    assert rc == 124, out
    # Named the moment the hang is found, before the slow dumps.
    stopped = first(lines, r"rank 1 stops before all_reduce")
    named = first(lines, r"hang, by PyTorch's collectives: rank 1 did not enter gloo:all_reduce "
                         r"#\d+ \(rank 0 waits in it\)")
    assert stopped is not None and named is not None, out
    print(f"rank 1 named {named - stopped:.1f} s after it stopped (--hang_timeout={HANG_TIMEOUT}; "
          f"goal {HANG_TIMEOUT + 2}); bench/pytorch_hang_bench.py measures it")
    assert named - stopped <= HANG_TIMEOUT + 6  # a bound for a loaded machine, not the goal
    assert re.search(r"rank 1 did not enter gloo:all_reduce #\d+", out), out
    assert re.search(r"rank 0 waits in gloo:all_reduce #\d+", out), out
    # PyTorch's own analyser on the dumps the hook wrote (Gloo has no dump pipe).
    assert "rank 0: dumped by ddprun's hook" in out and "rank 1: dumped by ddprun's hook" in out
    assert re.search(r"Not all ranks joining collective, sequence number: \d+", out), out
    assert "missing ranks: {1}" in out, out
    dumps = next(Path(tmp_path).glob("*/attempt_0/dumps"))
    torch_dir = dumps / "torch"
    assert (torch_dir / "nccl_trace_rank_0").is_file() and (torch_dir / "nccl_trace_rank_1").is_file()
    rank1 = (dumps / "rank_1.txt").read_text()
    if (Path(sys.executable).parent / "py-spy").exists():
        # Both ranks' Python stacks, in the rank files and the summary.
        assert re.search(r"stuck_before_all_reduce \(.*pytorch_hang_job.py:\d+\)", rank1), rank1
        assert "pytorch_hang_job.py" in (dumps / "rank_0.txt").read_text()
        summary = (dumps / "summary.txt").read_text()
        assert re.search(r"python Thread \d+ .*:\n\s*stuck_before_all_reduce", summary), summary
        assert re.search(r"python Thread \d+ .*:\n\s*all_reduce \(", summary), summary


@pytest.mark.parametrize("where", ["log_dir", "TMPDIR"])
def test_a_colon_in_the_log_directory_still_gets_the_hook_loaded(tmp_path, where):
    # Attack 105: the hook's directory went on PYTHONPATH with the log directory's ':' (a time in
    # its name), Python split it there, and no hang was ever found. It goes elsewhere now.
    odd = tmp_path / "run 12:30"
    odd.mkdir()
    args = [DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2", f"--hang_timeout={HANG_TIMEOUT}",
            "--hang_detect=torch", *([f"--log_dir={odd}"] if where == "log_dir" else []), JOB,
            "--hang-step", "3"]
    r = subprocess.run(args, env={**env(), **({"TMPDIR": str(odd)} if where == "TMPDIR" else {})},
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 124, r.stderr
    m = re.search(r"the PyTorch hook goes in (/[^:]*/ddprun-torch-hook\.\w+) \(removed at the "
                  r"end\), not in the log directory .*run 12:30.*: its path has a ':'", r.stderr)
    assert m, r.stderr
    assert re.search(r"hang, by PyTorch's collectives: rank 1 did not enter gloo:all_reduce",
                     r.stderr), r.stderr
    assert not Path(m[1]).exists()  # removed at the end


def test_slow_but_progressing_job_is_not_hung(tmp_path):
    # Slow steps are the point; PyTorch's teardown at exit took over 3 s under a loaded CI (both
    # ranks then "hung at exit"), so the exit gets the bound the next test gives it.
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=20",
               "--hang_detect=torch", JOB,
               "--steps", "8", "--step-sleep", "1.0")
    assert r.returncode == 0, r.stderr


P2P_LOOP = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r, t = dist.get_rank(), torch.zeros(4)
dist.all_reduce(t)  # the rank has beaten: ddprun watches it from now on
end = time.monotonic() + 6
while time.monotonic() < end:  # a pipeline stage's traffic: no collective at all
    (dist.isend(t, 1) if r == 0 else dist.irecv(t, 0)).wait()
    time.sleep(0.05)
dist.destroy_process_group()
print("p2p loop done", flush=True)
"""


def test_a_steady_isend_irecv_loop_is_progress(tmp_path):
    # isend and irecv were not watched: 6 s of them with no collective was a hang at 2 s
    # (attack 92).
    script = tmp_path / "p2p.py"
    script.write_text(P2P_LOOP)
    r = ddprun(tmp_path / "logs", "--hang_timeout=2", "--hang_detect=torch", str(script))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("p2p loop done") == 2, r.stdout


UNWRITABLE_PROGRESS = """
import os, time, torch, torch.distributed as dist
# The hook cannot write this rank's progress file (as on a full disk): a directory in its place.
os.makedirs(os.path.join(os.environ["DDPRUN_TORCH_DIR"], "progress_" + os.environ["RANK"]))
dist.init_process_group("gloo")
end = time.monotonic() + 6
while time.monotonic() < end:
    dist.all_reduce(torch.ones(4))
    time.sleep(0.05)
dist.destroy_process_group()
os.write(1, b"trained through\\n")
"""


def test_a_progress_file_that_cannot_be_written_is_not_a_hang(tmp_path):
    # The hook's watcher stopped at the first file it could not write ("progress off"), and with
    # it the heartbeat: a rank that trained on was declared hung after --hang_timeout.
    script = tmp_path / "job.py"
    script.write_text(UNWRITABLE_PROGRESS)
    r = ddprun(tmp_path / "logs", "--hang_timeout=2", "--hang_detect=torch", str(script))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("trained through") == 2, r.stdout
    assert r.stderr.count("the hang report will lack this rank's collectives; its heartbeat "
                          "goes on") == 2, r.stderr


def test_a_program_without_torch_has_no_thread_of_ddprun(tmp_path):
    # The hook's watcher ran in every Python of the job: a program waiting for its own threads
    # to end (threading.active_count() > 1) waited for good; under torchrun it ends (attack 92).
    script = tmp_path / "threads.py"
    script.write_text("import threading, time\n"
                      "for _ in range(3): threading.Thread(target=time.sleep, args=(0.2,)).start()\n"
                      "while threading.active_count() > 1: time.sleep(0.05)\n"
                      "import os\n"  # one write per rank: under -u a print of two items is two
                      "os.write(1, ('threads done %s\\n' % [t.name for t in threading.enumerate()])"
                      ".encode())\n")
    r = ddprun(tmp_path / "logs", "--hang_timeout=5", "--hang_detect=torch", str(script),
               timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("threads done ['MainThread']") == 2, r.stdout


GRACE_JOB = """
import ctypes, signal, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
def on_term(signum, frame):
    print(f"rank {rank} got SIGTERM at {time.time():.3f}", flush=True)
signal.signal(signal.SIGTERM, on_term)  # a checkpoint to save: it lets the grace run out
t = torch.ones(1)
dist.all_reduce(t)
if rank == 1:
    ctypes.PyDLL(None).sleep(100000)  # hung holding the GIL: the dump waits for its hook
while True:
    time.sleep(0.05)  # hung, running its SIGTERM handler
"""


def test_the_grace_after_a_hang_starts_at_sigterm_not_before_the_dump(tmp_path):
    """The dump takes seconds (rank 1 holds the GIL, so its hook cannot answer); SIGTERM comes
    after it, and the --shutdown_timeout grace from then. The dump's time was taken out of the
    grace: SIGKILL came 0.4 s after SIGTERM with an 8 s grace (found by an attacking helper)."""
    script = tmp_path / "grace.py"
    script.write_text(GRACE_JOB)
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=4",
                        f"--log_dir={tmp_path}", f"--hang_timeout={HANG_TIMEOUT}",
                        "--hang_detect=torch", str(script)], env=env(), capture_output=True,
                       text=True, timeout=120)
    ended = time.time()
    assert r.returncode == 124, r.stderr
    got = re.search(r"rank 0 got SIGTERM at ([\d.]+)", r.stdout)
    assert got, r.stdout + r.stderr
    assert ended - float(got.group(1)) >= 3.8, (ended - float(got.group(1)), r.stderr)


NEVER_JOINS = """
import os, time, torch, torch.distributed as dist
if os.environ["RANK"] == "1":
    time.sleep(100000)  # stuck before it joins (data preparation that hangs)
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
"""


def test_the_rank_that_never_joined_is_the_root_cause_not_the_one_waiting_for_it(tmp_path):
    """Neither rank beat before --startup_timeout: rank 0 waits in init_process_group for rank 1,
    which never connected to the job's store. Rank 0 was named the root cause (the first in
    order); now the rank with no connection to the store is (found by an attacking helper)."""
    script = tmp_path / "never_joins.py"
    script.write_text(NEVER_JOINS)
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                        f"--log_dir={tmp_path}", "--startup_timeout=8", "--hang_detect=torch",
                        str(script)], env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 124, r.stderr
    assert re.search(r"rank 1 is not connected to the job's store \(port \d+\), while the "
                     r"others are and wait there", r.stderr), r.stderr
    assert re.search(r"the job failed: node 0 \(.*\): rank 1 \(local_rank 1", r.stderr), r.stderr


BARRIERS = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
stop = int(sys.argv[1])  # rank 1 stops before this barrier; -1: never
for i in range(1, 10**9):
    if os.environ["RANK"] == "1" and i == stop:
        os.write(1, f"rank 1 stops before monitored_barrier {i}\\n".encode())
        time.sleep(100000)
    dist.monitored_barrier(timeout=__import__("datetime").timedelta(seconds=600))
    if i * 0.05 > float(sys.argv[2]):
        break
    time.sleep(0.05)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("stop", [-1, 20])
def test_monitored_barriers_are_progress_and_the_rank_missing_one_is_named(tmp_path, stop):
    """A loop of monitored_barrier alone: Gloo makes it of sends and recvs inside PyTorch, which
    its flight recorder leaves out. It was taken for a hang (no progress after the one
    all_reduce) and killed; a rank that stopped calling it was not named (found by an attacking
    helper). The hook records each call: a healthy loop runs on, and the rank missing a barrier
    is the root cause."""
    script = tmp_path / "barriers.py"
    script.write_text(BARRIERS)
    seconds = HANG_TIMEOUT + 3
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                        f"--log_dir={tmp_path}", f"--hang_timeout={HANG_TIMEOUT}",
                        "--exit_timeout=20", "--hang_detect=torch", str(script), str(stop),
                        str(seconds)], env=env(), capture_output=True, text=True, timeout=120)
    if stop < 0:
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode == 124, r.stderr
    assert re.search(r"hang, by PyTorch's collectives: rank 1 did not enter monitored_barrier "
                     r"#20 \(rank 0 waits in it\)", r.stderr), r.stderr
    assert re.search(r"the job failed: node 0 \(.*\): rank 1 \(local_rank 1", r.stderr), r.stderr


PROBE = """
import datetime, os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
sub = dist.new_group([0, 1])
if rank == 0:  # a probe rank 1 never joins: it raises after 1 s, and the program goes on
    try:
        dist.monitored_barrier(group=sub, timeout=datetime.timedelta(seconds=1))
    except RuntimeError as e:
        print("probe failed, carrying on:", e, flush=True)
for i in range(30):
    if i == 10 and rank == 0:
        print("rank 0 stops outside collectives", flush=True)
        time.sleep(100000)
    dist.all_reduce(torch.ones(1))
    time.sleep(0.1)
"""


def test_a_monitored_barrier_that_raised_and_was_caught_is_not_blamed_for_a_later_hang(tmp_path):
    """The hook kept a barrier that raised as entered, and its error text in rank 0's output
    was taken for the cause: a later hang of rank 0 (outside collectives) was blamed on rank 1,
    which missed the probe (found by an attacking helper). A raised barrier's group is no longer
    compared, and a hung rank's output is not read for what it raised and caught."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", str(script),
               timeout=120)
    assert r.returncode == 124, r.stderr
    assert "probe failed, carrying on" in r.stdout, r.stdout
    assert re.search(r"hang, by PyTorch's collectives: rank 0 did not enter gloo:all_reduce #\d+ "
                     r"\(rank 1 waits in it\)", r.stderr), r.stderr
    assert re.search(r"monitored_barrier .*raised on rank 0: its calls are not compared",
                     r.stderr), r.stderr
    assert "did not reach monitored_barrier" not in r.stderr, r.stderr
    assert re.search(r"the job failed: node 0 \(.*\): rank 0 \(local_rank 0", r.stderr), r.stderr


def test_with_a_subgroup_the_rank_that_stopped_is_named_not_the_one_blocked_by_it(tmp_path):
    """Ranks 0,1 all_reduce in a process group of their own; rank 1 stops before that one. Rank 0
    waits in it and so falls behind rank 2 in the default group. Numbers of different groups were
    compared as one (rank 0 blamed), and PyTorch's analyser failed with a KeyError on the hook's
    dumps of several groups (found in review)."""
    rc, lines = timed_lines([DDPRUN, "--nproc_per_node=3", "--shutdown_timeout=2",
                             f"--log_dir={tmp_path}", f"--hang_timeout={HANG_TIMEOUT}",
                             "--hang_detect=torch", JOB, "--subgroup", "--hang-step", "20",
                             "--step-sleep", "0.02"], timeout=120)
    out = "".join(line for _, line in lines)
    assert rc == 124, out
    assert re.search(r"hang, by PyTorch's collectives: rank 1 did not enter gloo:all_reduce #\d+ "
                     r"\(rank 2 waits in it\), nor gloo:all_reduce #\d+ of process group \S+ "
                     r"\(ranks 0,1\) \(rank 0 waits in it\);", out), out
    assert re.search(r"rank 0 waits in gloo:all_reduce #\d+ of process group \S+ \(ranks 0,1\)",
                     out), out
    assert "KeyError" not in out and "missing ranks: {1}" in out, out
    assert re.search(r"the job failed: node 0 \(.*\): rank 1 \(local_rank 1", out), out


def test_the_interpreter_given_as_the_program_runs_the_analysis(tmp_path):
    """`ddprun /path/python script.py` with rank 1 stuck before it joins: no rank's hook made a
    process group, and the dump said the program does not run under Python (attack 112)."""
    script = tmp_path / "never_joins.py"
    script.write_text(NEVER_JOINS)
    r = ddprun(tmp_path, "--startup_timeout=8", "--hang_detect=torch", sys.executable, str(script),
               timeout=120)
    assert r.returncode == 124, r.stderr
    assert "does not run under Python" not in r.stdout + r.stderr, r.stderr
    assert "no analysis: no rank's flight recorder came" in r.stdout + r.stderr, r.stderr


FIVE_ALL_REDUCES = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(5):
    dist.all_reduce(t)
if dist.get_rank() == 1:
    time.sleep(100000)
dist.all_reduce(t)
"""


HOOKED = ("export PYTHONPATH={dir}:$PYTHONPATH",
          # A helper Python of the wrapper's without the hook, beside the hooked trainer (attack
          # 113: the helper was taken for the rank's Python).
          "{python} -I -c 'import time; time.sleep(8)' & export PYTHONPATH={dir}:$PYTHONPATH")


@pytest.mark.parametrize("wrapper", ["export PYTHONPATH={dir}", *HOOKED,
                                     "export PYTHONPATH={dir}:$PYTHONPATH; set -- -E"])
def test_a_wrapper_that_leaves_the_hook_out_is_said_at_once(tmp_path, wrapper):
    """A wrapper that sets PYTHONPATH instead of adding to it (or runs python -E) leaves the
    hook out: nothing was said, and the verdict claimed the hang was before the first
    collective (after five of them) or blamed the waiting rank (attack 112). The hookless
    Python is said as soon as it runs, and the verdict says what is not known."""
    script = tmp_path / "job.py"
    script.write_text(FIVE_ALL_REDUCES)
    wrap = tmp_path / "wrap.sh"
    wrap.write_text(f"#!/bin/sh\n{wrapper.format(dir=tmp_path, python=sys.executable)}\n"
                    f'exec {sys.executable} "$@" {script}\n')
    wrap.chmod(0o755)
    r = ddprun(tmp_path, "--startup_timeout=10", "--hang_timeout=4", "--hang_detect=torch",
               str(wrap), timeout=120)
    assert r.returncode == 124, r.stderr
    hookless = wrapper not in HOOKED
    said = re.findall(r"rank (\d) \(local_rank \d, pid \d+\): its Python \(pid \d+: .*\) runs "
                      r"without the hook of --hang_detect=torch: (.*), without ddprun's hook "
                      r"directory", r.stderr)
    if not hookless:
        assert not said, r.stderr
        assert re.search(r"rank 1 did not enter gloo:all_reduce #6", r.stderr), r.stderr
        return
    assert sorted(rank for rank, _ in said) == ["0", "1"], r.stderr
    why = said[0][1]
    assert why == ("it runs with -E, which ignores PYTHONPATH" if "-E" in wrapper
                   else f'its PYTHONPATH is "{tmp_path}"'), r.stderr
    assert "the hang is before the first one" not in r.stderr, r.stderr
    assert re.search(r"hang, by PyTorch's collectives: rank 0's Python \(pid \d+\) runs without "
                     r"ddprun's hook \(.*\); rank 1's Python .*: where the hang is is not known",
                     r.stderr), r.stderr


BEFORE_FIRST_JOB = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(1000)  # stuck before its first collective (loading data, say)
dist.all_reduce(torch.ones(2))
"""


def test_a_rank_stuck_before_its_first_collective_is_named_and_the_root_cause(tmp_path):
    """Rank 1 recorded no collective, so it was neither behind nor hung (it never beat): rank 0,
    waiting in #1, was the root cause, and the verdict said "every local rank waits" (found by an
    attacking helper)."""
    script = tmp_path / "first.py"
    script.write_text(BEFORE_FIRST_JOB)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", str(script))
    assert r.returncode == 124, r.stderr
    assert ("hang, by PyTorch's collectives: rank 1 did not enter gloo:all_reduce #1 (rank 0 "
            "waits in it);") in r.stderr, r.stderr
    assert re.search(r"the job failed: node 0 \(.*\): rank 1 \(local_rank 1, pid \d+\) hung: the "
                     r"workers found hung wait for it", r.stderr), r.stderr


CHILD_JOB = """
import subprocess, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(2))
if dist.get_rank() == 1:  # waits for a child that never ends (a DataLoader worker, say)
    subprocess.run([sys.executable, "-c", "import time\\ndef child_stuck():\\n    time.sleep(1000)\\n"
                    "child_stuck()"])
dist.all_reduce(torch.ones(2))
"""


def test_the_dump_has_the_stacks_of_a_ranks_child_processes(tmp_path):
    """A rank stuck waiting for its child (a DataLoader worker in __getitem__): the child's
    frame, the cause, was in no dump (found by an attacking helper)."""
    if shutil.which("py-spy", path=env()["PATH"]) is None:
        pytest.skip("py-spy is not installed")
    script = tmp_path / "child.py"
    script.write_text(CHILD_JOB)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", str(script))
    assert r.returncode == 124, r.stderr
    dumps = list(tmp_path.glob("*/attempt_0/dumps/rank_1.txt"))
    assert len(dumps) == 1, r.stderr
    text = dumps[0].read_text()
    assert "its child processes (py-spy dump --subprocesses):" in text, text
    assert "child_stuck (<string>:3)" in text, text


P2P_JOB = """
import sys, time, torch, torch.distributed as dist
from torch.distributed import batch_isend_irecv, P2POp, isend
dist.init_process_group("gloo"); r = dist.get_rank(); t = torch.ones(2)
dist.all_reduce(t)
if r == 0:  # at once: the hook must see p2p from the start
    if sys.argv[1] == "send":
        dist.send(t, 1)
    else:
        for w in batch_isend_irecv([P2POp(isend, t, 1)]):
            w.wait()
elif r == 1:
    time.sleep(1000)  # never receives
dist.all_reduce(t)
"""


@pytest.mark.parametrize("how", ["send", "batch"])
def test_a_rank_blocked_in_a_send_is_not_blamed_the_one_that_never_receives_is(tmp_path, how):
    """Gloo's flight recorder does not record send and recv: rank 0, blocked in a send to rank
    1, was blamed with rank 1 (found by an attacking helper). The hook records them itself."""
    script = tmp_path / "p2p.py"
    script.write_text(P2P_JOB)
    r = ddprun(tmp_path, "--nproc_per_node=3", f"--hang_timeout={HANG_TIMEOUT}",
               "--hang_detect=torch", str(script), how, timeout=120)
    assert r.returncode == 124, r.stderr
    assert re.search(r"hang, by PyTorch's collectives: rank 1 did not enter gloo:all_reduce #2 "
                     r"\(rank 2 waits in it\), nor post the recv for rank 0's send to rank 1 "
                     r"\(rank 0 waits in it\);", r.stderr), r.stderr
    assert "rank 0 waits in send to rank 1 (point to point" in r.stderr, r.stderr
    assert re.search(r"the job failed: node 0 \(.*\): rank 1 \(local_rank 1", r.stderr), r.stderr


def test_each_dump_on_request_gets_fresh_flight_recorders_of_its_own(tmp_path):
    """`ddprun dump` twice on a healthy job: each request's directory gets every rank's flight
    recorder, dumped for it (the hook answered only the first request, and both summaries
    pointed at one shared directory); the line says a dump on request, not a hang."""
    p = subprocess.Popen([DDPRUN, "--nproc_per_node=2", f"--log_dir={tmp_path}",
                          "--hang_timeout=60", "--hang_detect=torch", JOB, "--steps", "400",
                          "--step-sleep", "0.05"], env=env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        progress = list(Path(tmp_path).glob("*/attempt_0/dumps/torch"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                progress and all((progress[0] / f"progress_{r}").exists() for r in (0, 1))):
            time.sleep(0.2)
            progress = list(Path(tmp_path).glob("*/attempt_0/dumps/torch"))
        for _ in range(2):
            d = subprocess.run([DDPRUN, "dump", str(p.pid)], capture_output=True, text=True,
                               timeout=60)
            assert d.returncode == 0, d.stderr
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert "dump on request: PyTorch's collectives now: " in err, err
    assert "error" not in err and "hang, by" not in err, err
    for k in (1, 2):
        torch_dir = next(Path(tmp_path).glob(f"*/attempt_0/dumps/request_{k}/torch"))
        for r in (0, 1):
            assert (torch_dir / f"nccl_trace_rank_{r}").is_file(), (k, r, err)


class FlightRecorders:
    """PyTorch's two flight recorders as torch._C._distributed_c10d dumps them: the generic one
    (Gloo's collectives) and, in a CUDA build, NCCL's own."""

    def __init__(self, nccl=True):
        self.gloo, self.nccl = [], []
        if not nccl:
            self._dump_nccl_trace = None

    def _dump_fr_trace(self, *args):
        return pickle.dumps({"entries": self.gloo})

    def _dump_nccl_trace(self, *args):
        return pickle.dumps({"entries": self.nccl})


def entry(record_id, seq, name, created_ns, group="0", retired=False):
    return {"record_id": record_id, "collective_seq_id": seq, "profiling_name": name,
            "process_group": (group, "default_pg"), "time_created_ns": created_ns,
            "retired": retired}


def test_the_hook_reads_the_nccl_flight_recorder_as_well_as_gloos():
    # On an H200 (torch 2.11, NCCL) a rank that stopped calling all_reduce was never found: the
    # hook read only the generic recorder, which holds no NCCL collective, so no rank was ever
    # watched. No GPU here: the hook's reading is checked on recorders of the same shape.
    here = Path(__file__).parents[2] / "python" / "ddprun_torch"
    spec = importlib.util.spec_from_file_location("ddprun_hook_under_test",
                                                  here / "sitecustomize.py")
    hook = importlib.util.module_from_spec(spec)
    saved = sys.modules.get("sitecustomize")
    sys.path.insert(0, str(here))  # the module it imports from beside it
    try:
        spec.loader.exec_module(hook)  # DDPRUN_TORCH_DIR unset here: no watcher starts
    finally:
        sys.path.remove(str(here))
        if saved is not None:
            sys.modules["sitecustomize"] = saved
    c10d = FlightRecorders()
    c10d.gloo = [entry(0, 1, "gloo:broadcast", 5, group="1"),
                 entry(1, 2, "gloo:broadcast", 20, group="1", retired=True)]
    c10d.nccl = [entry(0, 7, "nccl:all_reduce", 10, retired=True),
                 entry(1, 8, "nccl:all_reduce", 30)]
    recorded = hook._recorded(c10d)
    merged = hook._merged(recorded)
    assert [(e["profiling_name"], e["time_created_ns"]) for e in merged] == [
        ("gloo:broadcast", 5), ("nccl:all_reduce", 10), ("gloo:broadcast", 20),
        ("nccl:all_reduce", 30)]
    lines = hook._progress(None, merged, {}).splitlines()
    assert lines[0].startswith("2 gloo:broadcast retired 1 "), lines
    assert lines[1].startswith("8 nccl:all_reduce entered 0 "), lines
    # An NCCL collective finishing is progress (a beat), its entry the recorder's last.
    before = hook._position(recorded)
    c10d.nccl[-1]["retired"] = True
    assert hook._position(hook._recorded(c10d)) != before
    # A PyTorch without NCCL (a CPU build) has only the generic recorder.
    cpu = FlightRecorders(nccl=False)
    cpu.gloo = [entry(0, 1, "gloo:all_reduce", 5)]
    assert hook._merged(hook._recorded(cpu)) == cpu.gloo


EXITS_DURING_THE_DUMP = """
import os, time, threading
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for i in range(20):
    if i == 5:
        if rank == 1:
            while True:
                time.sleep(1)  # stops calling all_reduce
        def bye():  # rank 0 exits once ddprun asks the hooks to dump (the hang is found)
            req = os.path.join(os.environ["DDPRUN_TORCH_DIR"], "dump_request")
            while not os.path.exists(req):
                time.sleep(0.05)
            os._exit(3)
        threading.Thread(target=bye, daemon=True).start()
    dist.all_reduce(torch.ones(4))
"""


def test_a_rank_that_exits_during_the_hang_dump_does_not_replace_the_hang_as_the_cause(tmp_path):
    # Attack 79: the waiting rank exited 3 while the dump was written (its own collective
    # timeout, say) and became the root cause: exit 3, "worker_failure", the straggler not hung.
    job = tmp_path / "job.py"
    job.write_text(EXITS_DURING_THE_DUMP)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", str(job))
    assert re.search(r"hang, by PyTorch's collectives: rank 1 did not enter gloo:all_reduce",
                     r.stderr), r.stderr
    assert r.returncode == 124, r.stderr
    root = r.stderr[r.stderr.index("Root Cause"):]
    assert "rank      : 1 (local_rank: 1)" in root, r.stderr
    failures = r.stderr[r.stderr.index("Failures:"):r.stderr.index("Root Cause")]
    assert "exitcode  : 3" in failures, r.stderr  # listed, after it


WAITS_FOR_A_FULL_DISK = r"""
import os, sys, time, torch, torch.distributed as dist
go = sys.argv[1]
while not os.path.exists(go):  # the log directory is filled up meanwhile
    time.sleep(0.05)
dist.init_process_group("gloo")
t = torch.ones(4)
for step in range(200):
    if dist.get_rank() == 1 and step == 5:
        time.sleep(30)  # the hang
    dist.all_reduce(t)
    time.sleep(0.05)
"""


def test_a_hang_is_found_when_the_log_directory_is_full(tmp_path):
    """Attack 102: on a full log filesystem the hook could not write its claim of the rank, and
    left the rank unwatched without a word: the hang was never found. It now says so, watches
    the rank unclaimed, and the verdict says the hook could not record the collectives."""
    from test_logs import small_tmpfs
    job = tmp_path / "job.py"
    job.write_text(WAITS_FOR_A_FULL_DISK)
    go = tmp_path / "go"
    with small_tmpfs(tmp_path / "logs", "size=1m") as logs:
        p = subprocess.Popen([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                              "--hang_detect=torch", f"--hang_timeout={HANG_TIMEOUT}",
                              f"--log_dir={logs}", str(job), str(go)], env=env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not list(logs.glob("*/torch_hook/sitecustomize.py")):
                assert time.monotonic() < deadline and p.poll() is None, "no hook written"
                time.sleep(0.05)
            fill = os.open(logs / "fill", os.O_WRONLY | os.O_CREAT)  # every byte left
            try:
                while os.write(fill, b"\0" * 4096):
                    pass
            except OSError:
                pass
            os.close(fill)
            go.touch()
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode == 124, err
    assert re.search(r"ddprun torch hook: cannot claim rank \d in \S+ \(\[Errno 28\] No space "
                     r"left on device\): this process speaks for it unclaimed", err), err
    assert re.search(r"hang, by PyTorch's collectives: rank\(s\) [0-9,]+ made collectives, but "
                     r"the hook could not record them", err), err
