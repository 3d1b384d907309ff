"""--hang_detect=torch and a rank's life as the hook sees it: a rank that finished its program
but does not exit is hung at exit (dumped, never restarted), a slow finish is not; a program under
a wrapper script, a forked trainer, a helper Python with a process group of its own, DataLoader
workers that inherit the hook; the hook is off by default."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PYTHON, SOURCE, free_port
from hanglib import DDPRUN, HANG_TIMEOUT, JOB, ddprun, env

pytest.importorskip("torch")


def test_a_slow_finish_after_the_last_collective_is_not_hung(tmp_path):
    # Saving a checkpoint or tearing down after destroy_process_group: no collective is due.
    # Tearing PyTorch down took up to 3 s on this 2-core host under load: --exit_timeout above it.
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=20",
               "--hang_detect=torch", JOB, "--steps", "3", "--exit-sleep", str(HANG_TIMEOUT + 3))
    assert r.returncode == 0, r.stderr
    # At the interpreter's exit the hook removed the heartbeat files: no beat was due any more.
    assert len(list(Path(tmp_path).glob("*/attempt_0/*"))) >= 2
    assert not list(Path(tmp_path).glob("*/attempt_0/*/heartbeat"))


def test_a_rank_stuck_in_its_exit_is_hung_at_exit_and_not_restarted(tmp_path):
    for attempt in range(3):
        start = time.monotonic()
        r = ddprun(tmp_path / str(attempt), f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=4",
                   "--max_restarts=2", "--hang_detect=torch", JOB, "--steps", "3",
                   "--hang-at-exit")
        elapsed = time.monotonic() - start
        # PyTorch 2.12 sometimes aborts a rank in its interpreter's teardown ("terminate called
        # without an active exception": a thread of it takes the GIL as the interpreter ends)
        # before the finalizer hangs it (CI, once): that is a crash at exit, not this test's hang.
        if r.returncode != 134 or "(exit-crash failure)" not in r.stderr:
            break
        print(f"try {attempt}: rank 1 crashed in its teardown before it hung there; again")
    tmp_path = tmp_path / str(attempt)
    assert r.returncode == 124, r.stderr
    assert "rank 1 will hang at exit" in r.stdout
    assert re.search(r"rank 1 \(local_rank 1, pid \d+\) hung at exit: removed its heartbeat "
                     r"file [\d.]+ s ago and has not exited", r.stderr), r.stderr
    assert "not restarted: the hung worker's program had finished" in r.stderr, r.stderr
    assert "restarting" not in r.stderr, r.stderr
    assert [p.name for p in Path(tmp_path).glob("*/attempt_*")] == ["attempt_0"], r.stderr
    summary = next(Path(tmp_path).glob("*/attempt_0/dumps/summary.txt")).read_text()
    assert "rank 1: hung at exit, finishing (heartbeat file removed) since" in summary
    print(f"hung at exit named and stopped {elapsed:.1f} s after the start (--exit_timeout=4)")
    assert elapsed < 60


def test_a_rank_that_crashes_in_its_exit_after_finishing_is_not_restarted(tmp_path):
    # A finished program whose teardown crashes (a destructor, a thread at interpreter exit: seen
    # from PyTorch 2.12 itself) was restarted: the whole training again, to crash at its end again.
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--max_restarts=2",
               "--hang_detect=torch", JOB, "--steps", "3", "--abort-at-exit")
    assert r.returncode == 134, r.stderr
    assert "rank 1 will abort at exit" in r.stdout
    assert "not restarted: the crashed worker's program had finished" in r.stderr, r.stderr
    assert re.search(r"cause     : the worker's program had finished \(it removed its heartbeat "
                     r"file (just|[\d.]+ s) before\) and its process died of SIGABRT on its way "
                     r"out", r.stderr), r.stderr
    assert [p.name for p in Path(tmp_path).glob("*/attempt_*")] == ["attempt_0"], r.stderr
    report = json.loads(next(Path(tmp_path).glob("*/incident.json")).read_text())
    assert report["root_cause"]["class"] == "exit-crash", report


@pytest.mark.parametrize("after_destroy", ["0", "1"])
def test_a_rank_that_raised_and_then_crashed_in_its_exit_is_restarted(tmp_path, after_destroy):
    # The same crash after the program raised (even after destroy_process_group, which said it
    # was finishing): it failed, and is restarted as any failure; the exception is the cause.
    # Attack 104: raised a second after the destroy (the hook had given the rank's claim up), it
    # was taken for finished.
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--max_restarts=1",
               "--hang_detect=torch", JOB, "--steps", "3", "--abort-at-exit", "--raise-at-end",
               "--exit-sleep", after_destroy)
    assert r.returncode == 134, r.stderr
    assert len(list(Path(tmp_path).glob("*/attempt_*"))) == 2, r.stderr
    assert "program had finished" not in r.stderr, r.stderr
    assert re.search(r"cause     : the worker raised RuntimeError: rank 1 failed after its last "
                     r"destroy_process_group, then aborted \(SIGABRT\) on its way out", r.stderr), \
        r.stderr
    report = json.loads(next(Path(tmp_path).glob("*/incident.json")).read_text())
    assert report["root_cause"]["class"] == "worker", report


def test_a_crash_in_a_process_group_made_again_is_restarted(tmp_path):
    # Attack 104: destroy_process_group said the rank was finishing, and the hook made its
    # heartbeat file again only after the next init returned: a crash inside or just after it
    # was taken for one of a finished program, not restarted.
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--max_restarts=1",
               "--hang_detect=torch", JOB, "--steps", "3", "--exit-sleep", "1", "--again", "3",
               "--abort-in-again")
    assert r.returncode == 134, r.stderr
    assert "rank 1 aborts in its second process group" in r.stdout, r.stdout
    assert len(list(Path(tmp_path).glob("*/attempt_*"))) == 2, r.stderr
    assert "program had finished" not in r.stderr, r.stderr


def test_a_finished_program_under_a_wrapper_script_that_crashes_at_exit_is_not_restarted(tmp_path):
    # Attack 104: the shell's 128+6 was taken for the program's own exit code: restarted.
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--max_restarts=1",
               "--hang_detect=torch", "--no_python", "/bin/sh", "-c",
               f'"{sys.executable}" {JOB} --steps 3 --abort-at-exit; exit $?')
    assert r.returncode == 134, r.stderr
    assert "not restarted: the crashed worker's program had finished" in r.stderr, r.stderr
    assert [p.name for p in Path(tmp_path).glob("*/attempt_*")] == ["attempt_0"], r.stderr
    assert "a command it ran died of that signal" in r.stderr, r.stderr


def test_a_crash_in_a_second_python_of_the_rank_after_the_first_finished_is_restarted(tmp_path):
    # Attack 106: a wrapper script ran a first Python, which finished (finished_1), then a
    # second one, which crashed before its process group: taken for a crash at exit.
    second = "import os, signal; os.environ['RANK'] == '1' and os.kill(os.getpid(), signal.SIGSEGV)"
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=30",
               "--max_restarts=1", "--hang_detect=torch", "--no_python", "/bin/sh", "-c",
               f'"{sys.executable}" {JOB} --steps 3 && "{sys.executable}" -c "{second}"')
    assert r.returncode == 139, r.stderr
    assert len(list(Path(tmp_path).glob("*/attempt_*"))) == 2, r.stderr
    assert "program had finished" not in r.stderr, r.stderr


def test_a_rank_stuck_after_destroy_process_group_is_hung_at_exit(tmp_path):
    # Before, the hook beat at every look once the group was destroyed: this was never caught.
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=3",
               "--hang_detect=torch", JOB, "--steps", "3", "--hang-after-destroy")
    assert r.returncode == 124, r.stderr
    assert "rank 1 hangs after destroy_process_group" in r.stdout
    assert re.search(r"rank 1 \(local_rank 1, pid \d+\) hung at exit", r.stderr), r.stderr
    assert "not restarted" in r.stderr
    if (Path(sys.executable).parent / "py-spy").exists():
        summary = next(Path(tmp_path).glob("*/attempt_0/dumps/summary.txt")).read_text()
        assert "stuck_after_destroy" in summary, summary


@pytest.mark.parametrize("destroy", [True, False], ids=["destroyed", "not_destroyed"])
def test_a_thread_never_joined_at_exit_is_hung_at_exit_and_not_restarted(tmp_path, destroy):
    """The main module finished, and the interpreter waits to join a non-daemon thread that never
    ends, before the exit handlers run. Without destroy_process_group, this was an ordinary hang:
    the finished program was restarted (found by an attacking helper)."""
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=3", "--max_restarts=1",
               "--hang_detect=torch", JOB, "--steps", "3", "--forgotten-thread",
               *([] if destroy else ["--no-destroy"]))
    assert r.returncode == 124, r.stderr
    assert "rank 1 leaves a thread running" in r.stdout
    assert re.search(r"rank 1 \(local_rank 1, pid \d+\) hung at exit", r.stderr), r.stderr
    assert "not restarted: the hung worker's program had finished" in r.stderr, r.stderr
    assert "restarting" not in r.stderr, r.stderr


def run_at_exit(tmp_path, text, *args, after=(), timeout=60):
    """`text` as a script under the hook, with the exit and hang limits of these tests."""
    script = tmp_path / "job.py"
    script.write_text(text)
    return ddprun(tmp_path / "logs", f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=3",
                  "--hang_detect=torch", *args, str(script), *after, timeout=timeout)


FAILS_WITH_A_THREAD_LEFT = """
import multiprocessing, threading, time, torch, torch.distributed as dist
def train():
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    threading.Thread(target=lambda: time.sleep(3600)).start()  # non-daemon: never joined
    raise RuntimeError("the trainer failed")
# The trainer in a child the rank's Python started, as mp.spawn does.
p = multiprocessing.get_context("fork").Process(target=train)
p.start()
p.join()
raise SystemExit(p.exitcode)
"""


def test_a_failed_trainer_child_held_by_a_thread_is_a_hang_to_restart_not_one_at_exit(tmp_path):
    # A multiprocessing trainer that raised, with a thread never joined: taken for a finished
    # program hung at exit, not restarted, its failure lost (attack 92). sys.exit(3) in the
    # rank's own Python stays so: the hook cannot tell a caught SystemExit (attacks 94, 103).
    r = run_at_exit(tmp_path, FAILS_WITH_A_THREAD_LEFT, "--max_restarts=1", timeout=120)
    assert r.returncode == 124, r.stderr
    assert "had finished" not in r.stderr, r.stderr
    assert len(list((tmp_path / "logs").glob("*/attempt_*"))) == 2, r.stderr


ONE_DESTROYS = """
import threading, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
for _ in range(3):
    dist.all_reduce(torch.ones(1))
if dist.get_rank() == 0:
    dist.destroy_process_group()
threading.Thread(target=lambda: time.sleep(3600)).start()  # non-daemon: never joined
"""


def test_a_rank_off_the_store_after_destroy_is_not_said_to_have_never_joined(tmp_path):
    # Both hung at exit; rank 0 had destroyed its group, so it was off the store: it was said
    # to have never joined the job (attack 92).
    r = run_at_exit(tmp_path, ONE_DESTROYS)
    assert r.returncode == 124, r.stderr
    # Both, or the first past --exit_timeout alone when the other removed its heartbeat file
    # later (rank 0's destroy_process_group, on a loaded host: CI once named rank 1 alone).
    named = set(re.findall(r"rank (\d) \(local_rank \d, pid \d+\) hung at exit", r.stderr))
    assert named and named <= {"0", "1"}, r.stderr
    assert "did not join the job" not in r.stderr, r.stderr


SHORT_GROUP = """
import threading, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
threading.Thread(target=lambda: time.sleep(3600), name="leaky").start()
print("short group done", flush=True)
"""


def test_a_process_group_shorter_than_the_hooks_look_still_gets_its_hang_at_exit_named(tmp_path):
    # Made and destroyed between two looks of the hook's watcher (every 0.25 s), the group left
    # the rank unclaimed: its exit was never said and the job hung for good (attack 89).
    r = run_at_exit(tmp_path, SHORT_GROUP)
    assert r.returncode == 124, r.stderr
    assert r.stdout.count("short group done") == 2, r.stdout
    assert re.search(r"rank \d \(local_rank \d, pid \d+\) hung at exit", r.stderr), r.stderr


def test_the_path_a_users_own_sitecustomize_adds_is_kept(tmp_path):
    # The hook imports the user's sitecustomize it shadows, then put sys.path back as it was:
    # a site.addsitedir there was undone and the import failed (attack 89).
    (tmp_path / "usc").mkdir()
    (tmp_path / "extra").mkdir()
    (tmp_path / "usc" / "sitecustomize.py").write_text(
        f"import site\nsite.addsitedir({str(tmp_path / 'extra')!r})\n")
    (tmp_path / "extra" / "extramod.py").write_text("X = 42\n")
    script = tmp_path / "main.py"
    script.write_text("import sys, extramod\nprint('IMPORTED', extramod.X, flush=True)\n")
    e = env()
    e["PYTHONPATH"] = str(tmp_path / "usc") + os.pathsep + e.get("PYTHONPATH", "")
    r = subprocess.run([DDPRUN, "--nproc_per_node=1", "--hang_detect=torch", "--hang_timeout=30",
                        f"--log_dir={tmp_path / 'logs'}", str(script)], env=e,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "IMPORTED 42" in r.stdout, r.stdout


PY_WRAPPER = """
import subprocess, sys
sys.exit(subprocess.run([sys.executable, *sys.argv[1:]]).returncode)
"""
MP_WRAPPER = """
import multiprocessing, runpy, sys
def train(argv):
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
if __name__ == "__main__":
    child = multiprocessing.get_context(sys.argv[1]).Process(target=train, args=(sys.argv[2:],))
    child.start()
    child.join()
    sys.exit(child.exitcode)
"""


@pytest.mark.parametrize("wrapper_kind", ["sh", "python", "fork", "forkserver"])
def test_a_job_under_a_wrapper_script_gets_its_python_dumped_and_analysed(tmp_path, wrapper_kind):
    """`ddprun ./run.sh` where run.sh runs python as a child: the dump read only the shell
    (its wait4), and said the program does not run under Python, with no analysis (found by an
    attacking helper). Now py-spy reads the rank's Python and fr_trace runs on the dumps. A Python
    wrapper took the hook for itself, and the trainer it started was never watched: no hang was
    ever found (found by an attacking helper); the first Python to make a process group is the
    rank's. A trainer that multiprocessing forked (fork, forkserver) had no watcher thread at
    all (found by an attacking helper)."""
    if wrapper_kind == "sh":
        wrapper = tmp_path / "run.sh"
        wrapper.write_text(f'#!/bin/sh\n"{sys.executable}" {JOB} "$@"\n')
        wrapper.chmod(0o755)
        program = [str(wrapper)]
    elif wrapper_kind == "python":
        wrapper = tmp_path / "wrapper.py"
        wrapper.write_text(PY_WRAPPER)
        program = [str(wrapper), JOB]
    else:
        wrapper = tmp_path / "mp_wrapper.py"
        wrapper.write_text(MP_WRAPPER)
        program = [str(wrapper), wrapper_kind, JOB]
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", *program,
               "--steps", "100", "--hang-step", "5")
    assert r.returncode == 124, r.stderr
    assert re.search(r"hang, by PyTorch's collectives: rank 1 did not enter gloo:all_reduce",
                     r.stderr), r.stderr
    assert "no analysis" not in r.stderr, r.stderr
    assert "missing ranks: {1}" in r.stderr, r.stderr
    if (Path(sys.executable).parent / "py-spy").exists():
        rank1 = next(Path(tmp_path).glob("*/attempt_0/dumps/rank_1.txt")).read_text()
        assert "the rank's Python, pid" in rank1, rank1
        assert "stuck_before_all_reduce" in rank1, rank1


SPAWNS_TWO = """
import os, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp
def HUNG_HERE():
    time.sleep(1000)
def WAITING_HERE(t):
    dist.all_reduce(t)
def child(i, port):
    os.environ["MASTER_PORT"] = port
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    dist.init_process_group("gloo", rank=i, world_size=2)
    t = torch.ones(1)
    for step in range(20):
        if i == 1 and step == 5:
            HUNG_HERE()
        WAITING_HERE(t)
        time.sleep(0.1)
if __name__ == "__main__":
    mp.spawn(child, args=(sys.argv[1],), nprocs=2)
"""


def test_a_rank_that_spawns_its_trainers_gets_every_python_dumped(tmp_path):
    """One rank runs torch.multiprocessing.spawn: two Pythons with a process group of their
    own; one claims the rank, and its stack (and its children's) was all the dump held: the
    worker and the other child, which may be the hung one, were left out (attack 83)."""
    if not (Path(sys.executable).parent / "py-spy").exists():
        pytest.skip("py-spy is not installed beside this Python")
    job = tmp_path / "spawns.py"
    job.write_text(SPAWNS_TWO)
    r = subprocess.run([DDPRUN, "--nproc_per_node=1", "--shutdown_timeout=2",
                        f"--log_dir={tmp_path}", f"--hang_timeout={HANG_TIMEOUT}",
                        "--hang_detect=torch", str(job), str(free_port())],
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 124, r.stderr
    dump = next(Path(tmp_path).glob("*/attempt_0/dumps/rank_0.txt")).read_text()
    assert "HUNG_HERE" in dump and "WAITING_HERE" in dump, dump
    assert "the worker's other Python processes" in dump and "the worker itself:" in dump, dump
    assert "ProcessContext.join" in dump, dump  # the worker's own stack: waiting for its children


@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_a_forked_trainer_that_finishes_ends_the_job_well(tmp_path, context):
    """The watcher a forked trainer starts says the rank is finishing as it ends; the wrapper
    then exits (no hang at exit, no hang while it waits)."""
    wrapper = tmp_path / "mp_wrapper.py"
    wrapper.write_text(MP_WRAPPER)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=5",
               "--hang_detect=torch", str(wrapper), context, JOB, "--steps", "30",
               "--step-sleep", "0.1")
    assert r.returncode == 0, r.stderr
    assert "hung" not in r.stderr, r.stderr


HELPER = """
import sys, tempfile, time, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
dist.all_reduce(torch.ones(1))
time.sleep(1.5)
dist.destroy_process_group()
"""
MAIN = """
import subprocess, sys, time
helper = subprocess.Popen([sys.executable, sys.argv[1]])
time.sleep(1.0)  # the helper makes its process group first (it imports torch meanwhile)
import torch, torch.distributed as dist
dist.init_process_group("gloo")
for i in range(75):  # 15 s: longer than --exit_timeout, which the helper's exit started
    dist.all_reduce(torch.ones(1))
    time.sleep(0.2)
helper.wait()
dist.destroy_process_group()
"""


def test_a_helper_python_with_a_process_group_of_its_own_hands_the_rank_back(tmp_path):
    """A rank's Python starts a helper Python that makes, uses and destroys a process group of
    its own before the training starts: the helper claimed the rank first, the trainer's hook
    stopped watching, and the helper's exit (removing the heartbeat file) made the healthy rank
    "hung at exit" (found by an attacking helper). A claim is given up at destroy and at exit,
    that of an exited process (a zombie too) is taken over, and a hook that could not claim asks
    again."""
    helper, main = tmp_path / "helper.py", tmp_path / "main.py"
    helper.write_text(HELPER)
    main.write_text(MAIN)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=10",
               "--hang_detect=torch", str(main), str(helper), timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_process_group_made_again_after_destroy_runs_on(tmp_path):
    # Seen finishing during the sleep after the first group (ddprun looks every 3 s); the second
    # group's collectives create the heartbeat file again well before the 12 s are up, and it
    # trains for 18 s more: were it still taken for finishing, it would be hung at exit.
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                        f"--log_dir={tmp_path}", f"--hang_timeout={HANG_TIMEOUT}",
                        "--exit_timeout=12", "--hang_detect=torch",
                        JOB, "--steps", "3", "--exit-sleep", "4.5", "--again", "36",
                        "--step-sleep", "0.5"], env={**env(), "LOGLEVEL": "DEBUG"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for rank in (0, 1):
        assert f"rank {rank} removed its heartbeat file: finishing" in r.stderr, r.stderr
        assert f"rank {rank} created its heartbeat file again" in r.stderr, r.stderr


def test_hook_off_by_default(tmp_path):
    script = tmp_path / "show.py"
    # One write per rank: under python -u a print of several items is several writes, which
    # the two ranks interleave on the shared console.
    script.write_text("import os\nos.write(1, ('PP=' + os.environ.get('PYTHONPATH', '') + "
                      "' FR=' + os.environ.get('TORCH_FR_BUFFER_SIZE', '') + '\\n').encode())\n")
    r = ddprun(tmp_path / "logs", str(script))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(f"PP={os.environ.get('PYTHONPATH', '')} FR=") == 2, r.stdout


DATALOADER_JOB = """
import os, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
dist.init_process_group("gloo")
t = torch.ones(4)
loader = DataLoader(TensorDataset(torch.arange(16.0)), batch_size=4, num_workers=2)
for epoch in range(2):
    for (x,) in loader:
        dist.all_reduce(t)
        time.sleep(0.4)  # a step's work
    time.sleep(1.5)  # the loader's worker processes have exited
    # One write: the workers share the console (as under torchrun), and print() under
    # PYTHONUNBUFFERED=1 writes each of its pieces apart, which another rank's can split.
    beats = os.path.exists(os.environ["DDPRUN_HEARTBEAT_FILE"])
    os.write(1, f"heartbeat after epoch {epoch} {beats}\\n".encode())
dist.destroy_process_group()
"""


def test_dataloader_workers_exiting_do_not_make_the_rank_finishing(tmp_path):
    """Each DataLoader worker inherited the hook and, exiting at the end of an epoch, removed its
    rank's heartbeat file: the rank was taken for finishing, so a hang after it was a hang at exit
    (never restarted) and a pause longer than --exit_timeout killed a healthy job."""
    script = tmp_path / "loader.py"
    script.write_text(DATALOADER_JOB)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT + 10}", "--exit_timeout=20",
               "--hang_detect=torch", str(script), timeout=120)
    assert r.returncode == 0, r.stderr
    said = re.findall(r"heartbeat after epoch (\d) (\w+)", r.stdout)
    assert sorted(said) == [("0", "True")] * 2 + [("1", "True")] * 2, r.stdout


NON_DAEMON_THREAD = """
import os, sys, time, threading, torch, torch.distributed as dist
dist.init_process_group("gloo")
threading.Thread(target=lambda: time.sleep(100000)).start()  # never joined
for i in range(3):
    dist.all_reduce(torch.ones(4))
time.sleep(float(sys.argv[1]))
# One write: print() under python -u writes its pieces apart, which the other rank's can split.
os.write(1, f"main done, attempt {os.environ['TORCHELASTIC_RESTART_COUNT']}\\n".encode())
if sys.argv[2] == "raise":
    raise RuntimeError("training failed at step 3")
if sys.argv[2] == "record":  # torch's @record writes the exception to the error file
    from torch.distributed.elastic.multiprocessing.errors import record
    record(lambda: (_ for _ in ()).throw(RuntimeError("training failed at step 3")))()
if sys.argv[2] == "destroy_raise":  # the process group destroyed first: the rank said it finished
    dist.destroy_process_group()
    raise RuntimeError("training failed after destroy")
"""


def test_a_hang_at_exit_dump_shows_the_threads_its_exit_waits_for(tmp_path):
    # The dump of a program hung at exit showed its main thread in threading._shutdown and "no
    # flight recorder could be read" for every rank: the thread that kept it was in the rank
    # file alone. py-spy is found beside PYTHON_EXEC's Python too (a virtual environment that is
    # not activated): without it the dump had no Python stack at all.
    beside = Path(sys.executable).parent / "py-spy"
    if not beside.exists():
        pytest.skip(f"no py-spy beside {sys.executable}")
    job = tmp_path / "job.py"
    job.write_text(NON_DAEMON_THREAD.replace("threading.Thread(target=",
                                             "threading.Thread(name='keeper', target="))
    e = env()
    e["PATH"] = ":".join(p for p in e["PATH"].split(":")
                         if p and not (Path(p) / "py-spy").exists())
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--shutdown_timeout=2",
                        f"--log_dir={tmp_path}", f"--hang_timeout={HANG_TIMEOUT}",
                        "--hang_detect=torch", str(job), "0", "finish"],
                       env=e, capture_output=True, text=True, timeout=90)
    assert r.returncode == 124, r.stderr
    assert "flight recorders: not compared: every hung rank had finished its program" in r.stderr
    assert "no flight recorder could be read" not in r.stderr, r.stderr
    assert r.stderr.count("its other threads (its exit waits for those that are not daemons") == 2
    assert r.stderr.count('"keeper":') == 2, r.stderr
    assert "ddprun-torch-hook" not in r.stderr.split("main thread stacks", 1)[1], r.stderr


@pytest.mark.parametrize("pause", ["0", "1"])
def test_a_finished_main_module_with_a_thread_left_is_hung_at_exit_however_soon_it_ended(
        tmp_path, pause):
    # Attack 79: a main module that ended within the hook's first look (0.25 s) after
    # init_process_group had not claimed its rank: an ordinary hang, and the finished program
    # was run again.
    job = tmp_path / "job.py"
    job.write_text(NON_DAEMON_THREAD)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch",
               "--max_restarts=1", str(job), pause, "finish")
    assert r.returncode == 124, r.stderr
    assert r.stdout.count("main done") == 2, r.stdout  # 2 ranks, once each: not run again
    assert "hung at exit" in r.stderr, r.stderr


HAMMER_WRITE = """
import importlib.util, os, sys, threading
hook, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, hook)
spec = importlib.util.spec_from_file_location("ddprun_hook", os.path.join(hook, "sitecustomize.py"))
h = importlib.util.module_from_spec(spec)
spec.loader.exec_module(h)
errors = []
def hammer():
    for _ in range(3000):
        try:
            h._write(os.path.join(out, "python_0"), "%d %s\\n" % (os.getpid(), sys.executable))
        except Exception as e:
            errors.append(repr(e))
            return
threads = [threading.Thread(target=hammer) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
os.write(1, ("errors %d %s\\n" % (len(errors), errors[:1])).encode())
"""


def test_the_hooks_files_are_written_whole_by_threads_at_once(tmp_path):
    # CI: the watcher thread and the main thread's init_process_group both wrote python_<rank>
    # through one temporary name; one moved it away under the other, and FileNotFoundError came
    # out of the user's init_process_group (the restarted job failed).
    script = tmp_path / "hammer.py"
    script.write_text(HAMMER_WRITE)
    out = tmp_path / "torch"
    out.mkdir()
    e = {k: v for k, v in os.environ.items() if not k.startswith("DDPRUN_")}
    r = subprocess.run([PYTHON, str(script), str(SOURCE / "python" / "ddprun_torch"), str(out)],
                       capture_output=True, text=True, timeout=60, env=e)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "errors 0 []" in r.stdout, r.stdout + r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["python_0"]
    assert (out / "python_0").read_text().split()[0].isdigit()


def test_a_main_module_that_raised_with_a_thread_left_is_restarted_not_finished(tmp_path):
    # Attack 79: the hook took a main module that raised (a thread kept the process alive) for
    # a finished program: "hung at exit", not restarted, the RuntimeError nowhere in the cause.
    job = tmp_path / "job.py"
    job.write_text(NON_DAEMON_THREAD)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch",
               "--max_restarts=1", str(job), "0.5", "raise")
    assert "main done, attempt 1" in r.stdout, r.stdout + r.stderr
    assert "program had finished" not in r.stderr, r.stderr
    assert r.returncode == 124, r.stderr


@pytest.mark.parametrize("how", ["raise", "record"])
def test_a_hung_rank_that_had_raised_is_reported_with_its_exception(tmp_path, how):
    # Attack 83: a rank that raised, kept alive by a thread that is not a daemon, was reported
    # as "hung: no heartbeat" alone (error_file <N/A>), its exception nowhere in the report.
    job = tmp_path / "job.py"
    job.write_text(NON_DAEMON_THREAD)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--hang_detect=torch", str(job),
               "0.5", how)
    assert r.returncode == 124, r.stderr
    root = r.stderr.split("Root Cause (first observed failure):", 1)
    assert len(root) == 2, r.stderr
    said = ("it had raised before (its error file)" if how == "record"
            else "it had printed a traceback before")
    assert said in root[1], r.stderr
    assert "RuntimeError: training failed at step 3" in root[1], r.stderr
    if how == "record":
        assert re.search(r"error_file: \S+/error\.json", root[1]), r.stderr
    assert re.search(r"the job failed: .* hung: no heartbeat .*: RuntimeError: training failed at "
                     r"step 3\n", r.stderr), r.stderr


def test_a_main_module_that_raised_after_destroy_with_a_thread_left_is_restarted(tmp_path):
    # destroy_process_group said the rank was finishing (its heartbeat file removed), then the
    # main module raised, a thread never joined: "hung at exit", not restarted, as a finished
    # program. It had failed: the hook makes the file again, and it is restarted.
    job = tmp_path / "job.py"
    job.write_text(NON_DAEMON_THREAD)
    r = ddprun(tmp_path, f"--hang_timeout={HANG_TIMEOUT}", "--exit_timeout=3",
               "--hang_detect=torch", "--max_restarts=1", str(job), "0.5", "destroy_raise")
    assert r.returncode == 124, r.stderr
    assert "main done, attempt 1" in r.stdout, r.stdout + r.stderr
    assert "program had finished" not in r.stderr, r.stderr
    assert "RuntimeError: training failed after destroy" in r.stderr, r.stderr
