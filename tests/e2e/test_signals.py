"""Signals to ddprun and to its workers: forwarding, grace period, no orphans."""

import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import DDPRUN, PYTHON, base_env, pid_alive, run_ddprun, sh, wait_for, wait_for_files

# Each worker traps SIG, records it in got_<rank> and exits; pid_<rank> says it is ready.
TRAPPING_WORKER = """
trap 'echo {name} > {d}/got_$LOCAL_RANK; exit 0' {name}
sleep 30 &
echo $$ > {d}/pid_$LOCAL_RANK
wait
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                 signal.SIGQUIT])
def test_signal_to_ddprun_reaches_workers(sig, tmp_path, launch, pid_reaper):
    name = sig.name[3:]
    p = launch(["--nproc_per_node=2", *sh(TRAPPING_WORKER.format(name=name, d=tmp_path))])
    pids = wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])
    pid_reaper.extend(int(x) for x in pids)
    p.signal(sig)
    assert p.wait(timeout=10) == 128 + sig, p.output()
    for rank in (0, 1):
        assert (tmp_path / f"got_{rank}").read_text().strip() == name, p.output()


@pytest.mark.parametrize("given", [False, True], ids=["default", "signals_to_handle"])
def test_nohup_keeps_sighup_ignored_for_ddprun_and_the_workers(tmp_path, given):
    """`nohup ddprun ...` and the SSH session goes (SIGHUP): torchrun and ddprun stopped the
    job. Now SIGHUP stays ignored, in the workers too, unless --signals_to_handle names it."""
    flags = ["--signals_to_handle=SIGTERM,SIGHUP"] if given else []
    worker = sh(f'echo $$ > {tmp_path}/pid_$LOCAL_RANK; sleep 2; '
                f'grep SigIgn /proc/self/status; echo "rank $RANK survived"')
    p = subprocess.Popen(["nohup", str(DDPRUN), "--nproc_per_node=2", *flags, *worker],
                         env=base_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])
        p.send_signal(signal.SIGHUP)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    if given:
        assert p.returncode == 128 + signal.SIGHUP, err
        return
    assert p.returncode == 0, err
    assert "SIGHUP was ignored when ddprun started (nohup" in err, err
    assert sorted(re.findall(r"rank (\d) survived", out)) == ["0", "1"], out
    for mask in re.findall(r"SigIgn:\s+([0-9a-f]+)", out):
        assert int(mask, 16) & (1 << (signal.SIGHUP - 1)), out


# Writes its pid, then becomes a sleep that ignores SIGTERM.
IGNORES_TERM = "trap '' TERM; echo $$ > {d}/pid_$LOCAL_RANK; exec sleep 60"


@pytest.mark.parametrize("how", ["option", "env"])
def test_worker_ignoring_sigterm_is_killed_after_shutdown_timeout(how, tmp_path, launch,
                                                                  pid_reaper):
    args = ["--nproc_per_node=2", *sh(IGNORES_TERM.format(d=tmp_path))]
    env = base_env()
    if how == "option":
        args.insert(0, "--shutdown_timeout=1")
    else:
        env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "1"
    p = launch(args, env=env)
    pids = [int(x) for x in wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])]
    pid_reaper.extend(pids)
    sent = time.monotonic()
    p.signal(signal.SIGTERM)
    rc = p.wait(timeout=15)
    took = time.monotonic() - sent
    assert rc == 128 + signal.SIGTERM, p.output()
    assert 0.9 <= took < 3.5, f"stopped {took:.2f}s after SIGTERM\n{p.output()}"
    assert not any(pid_alive(pid) for pid in pids), p.output()


# Survives SIGTERM (its sleep does not); records each one.
SURVIVES_TERM = """
trap 'echo TERM >> {d}/got_$LOCAL_RANK' TERM
echo $$ > {d}/pid_$LOCAL_RANK
while :; do sleep 0.05; done
"""


SURVIVES_INT = SURVIVES_TERM.replace("TERM", "INT")


def test_second_ctrl_c_skips_the_grace_period(tmp_path, launch, pid_reaper):
    p = launch(["--shutdown_timeout=30", *sh(SURVIVES_INT.format(d=tmp_path))])
    pid = int(wait_for_files([tmp_path / "pid_0"])[0])
    pid_reaper.append(pid)
    sent = time.monotonic()
    p.signal(signal.SIGINT)
    wait_for_files([tmp_path / "got_0"])  # the first SIGINT reached the worker, which lives on
    assert p.proc.poll() is None, p.output()
    time.sleep(0.2)  # a second press (within 150 ms it would be the same one, delivered twice)
    p.signal(signal.SIGINT)
    assert p.wait(timeout=10) == 128 + signal.SIGINT, p.output()
    assert time.monotonic() - sent < 5, p.output()
    wait_for(lambda: not pid_alive(pid), timeout=5, what=f"worker {pid} to be killed")
    # Said, not silent (attack 87).
    assert "received SIGINT again: the grace is skipped, SIGKILL to the workers left" in \
        p.stderr(), p.output()


def test_failure_stops_term_ignoring_sibling_after_shutdown_timeout(tmp_path, launch,
                                                                    pid_reaper):
    # Rank 0 ignores SIGTERM; rank 1 fails once rank 0 is up: rank 0 is SIGKILLed after 1 s.
    script = (f'if [ "$LOCAL_RANK" = 0 ]; then {IGNORES_TERM.format(d=tmp_path)}; fi; '
              f'while [ ! -s {tmp_path}/pid_0 ]; do sleep 0.01; done; exit 4')
    p = launch(["--nproc_per_node=2", "--shutdown_timeout=1", *sh(script)])
    pid = int(wait_for_files([tmp_path / "pid_0"])[0])
    pid_reaper.append(pid)
    start = time.monotonic()
    assert p.wait(timeout=15) == 4, p.output()
    assert time.monotonic() - start < 3.5, p.output()
    assert not pid_alive(pid)
    assert "exitcode  : 4 " in p.stderr(), p.output()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_and_a_first_failure_are_said_at_once_not_after_the_grace(tmp_path, launch,
                                                                          pid_reaper, sig):
    """Workers that take their grace (a checkpoint, or SIGTERM ignored) left the user with no
    sign for --shutdown_timeout that ddprun heard the signal, or saw the failure; torchrun says
    "Received 15 death signal, shutting down workers" at once (found by an attacking helper)."""
    p = launch(["--nproc_per_node=2", "--shutdown_timeout=8",
                *sh(SURVIVES_TERM.replace("TERM", "TERM INT").format(d=tmp_path))])
    pid_reaper.extend(int(x) for x in wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"]))
    p.signal(sig)
    name = signal.Signals(sig).name
    said = wait_for(lambda: re.search(
        rf"received {name}: stopping the workers \({name} passed to each now, SIGKILL to those "
        rf"left after --shutdown_timeout=8 s", p.stderr()), timeout=3, what="the acknowledgement")
    assert said, p.output()
    assert ("Ctrl-C again kills them at once" in p.stderr()) == (sig == signal.SIGINT), p.output()
    p.signal(signal.SIGKILL)
    p.wait(timeout=10)
    # A failure: rank 1 exits 4 while rank 0 ignores SIGTERM.
    d = tmp_path / "failure"
    d.mkdir()
    script = (f'if [ "$LOCAL_RANK" = 0 ]; then {IGNORES_TERM.format(d=d)}; fi; '
              f'while [ ! -s {d}/pid_0 ]; do sleep 0.01; done; exit 4')
    f = launch(["--nproc_per_node=2", "--shutdown_timeout=8", *sh(script)])
    pid_reaper.append(int(wait_for_files([d / "pid_0"])[0]))
    said = wait_for(lambda: re.search(
        r"rank 1 \(local_rank 1, pid \d+\) failed: exit code 4; stopping the other workers "
        r"\(SIGTERM now, SIGKILL to those left after --shutdown_timeout=8 s\)", f.stderr()),
        timeout=3, what="the failure said")
    assert said, f.output()
    assert f.proc.poll() is None, f.output()  # still in the grace
    f.signal(signal.SIGKILL)
    f.wait(timeout=10)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_while_a_failed_group_stops_ends_the_job(tmp_path, launch, pid_reaper, sig):
    """Rank 1 fails; rank 0 ignores SIGTERM, so its grace (--shutdown_timeout=3) runs; a
    signal to ddprun then (Slurm's time limit) ends the job: no restart though --max_restarts
    allows one, exit 128+N, the failure still reported. Before, the signal was lost: the job
    restarted and ended with the worker's exit code."""
    script = (f'if [ "$LOCAL_RANK" = 0 ]; then {IGNORES_TERM.format(d=tmp_path)}; fi; '
              f'while [ ! -s {tmp_path}/pid_0 ]; do sleep 0.01; done; '
              f'echo 1 > {tmp_path}/failing; exit 4')
    p = launch(["--nproc_per_node=2", "--shutdown_timeout=3", "--max_restarts=1", *sh(script)])
    pid_reaper.append(int(wait_for_files([tmp_path / "pid_0"])[0]))
    wait_for_files([tmp_path / "failing"])
    time.sleep(0.5)  # the group is stopping
    p.signal(sig)
    assert p.wait(timeout=15) == 128 + sig, p.output()
    err = p.stderr()
    assert f"received {sig.name} while the workers are being stopped" in err, p.output()
    assert "restart 1 of 1" not in err, p.output()
    assert "exitcode  : 4 " in err, p.output()


@pytest.mark.parametrize("gap", [0.05, 0.5])
def test_a_job_wide_signal_that_reaches_the_workers_first_uses_no_restart(tmp_path, launch,
                                                                          pid_reaper, gap):
    """A scheduler signals every process of the job; the workers' copies came `gap` seconds
    before ddprun's: the group was done by then and restarted, using a restart (attack 87). It
    settles a second for ddprun's own copy: no failure, no restart, exit 128+15."""
    script = f"echo $$ > {tmp_path}/pid_$LOCAL_RANK; exec sleep 30"
    p = launch(["--nproc_per_node=2", "--max_restarts=3", *sh(script)])
    pids = [int(t) for t in wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])]
    pid_reaper.extend(pids)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    time.sleep(gap)
    p.signal(signal.SIGTERM)
    assert p.wait(timeout=15) == 128 + signal.SIGTERM, p.output()
    err = p.stderr()
    assert "restart 1 of 3" not in err, err
    assert "Root Cause" not in err, err


# Traps USR1 (sleep, in the same group, dies of it); finishes once it saw USR1. Also used
# with another signal's name in place of USR1.
USR1_WORKER = """
trap 'echo USR1 > {d}/got_$LOCAL_RANK' USR1
echo $$ > {d}/pid_$LOCAL_RANK
while [ ! -f {d}/got_$LOCAL_RANK ]; do sleep 0.05; done
echo "rank $LOCAL_RANK done"
"""


@pytest.mark.parametrize("sig, flags", [
    (signal.SIGUSR1, ["--signals_to_handle=SIGTERM,SIGUSR1"]),
    # A terminal's resize: the workers, each in a session of its own, get it through ddprun.
    (signal.SIGWINCH, []),
])
def test_signal_is_forwarded_and_job_continues(tmp_path, launch, pid_reaper, sig, flags):
    name = sig.name[3:]
    p = launch([*flags, "--nproc_per_node=2",
                *sh(USR1_WORKER.replace("USR1", name).format(d=tmp_path))])
    pids = wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])
    pid_reaper.extend(int(x) for x in pids)
    p.signal(sig)
    assert p.wait(timeout=10) == 0, p.output()
    for rank in (0, 1):
        assert (tmp_path / f"got_{rank}").read_text().strip() == name
    assert sorted(p.stdout().splitlines()) == ["rank 0 done", "rank 1 done"], p.output()
    # A worker without a handler would die of it: who sent it is said, once (attack 87).
    said = f"received {sig.name}: passed on to every worker (--signals_to_handle)"
    assert (said in p.stderr()) == (sig == signal.SIGUSR1), p.output()


def test_sigkill_of_ddprun_leaves_no_worker(tmp_path, launch, pid_reaper):
    # The workers are the direct children (exec): PR_SET_PDEATHSIG applies to them.
    p = launch(["--nproc_per_node=2", *sh(f"echo $$ > {tmp_path}/pid_$LOCAL_RANK; exec sleep 60")])
    pids = [int(x) for x in wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])]
    pid_reaper.extend(pids)
    assert all(pid_alive(pid) for pid in pids)
    p.signal(signal.SIGKILL)
    p.wait(timeout=5)
    wait_for(lambda: not any(pid_alive(pid) for pid in pids), timeout=5,
             what=f"workers {pids} to die with ddprun")


def test_python_workers_die_with_ddprun(tmp_path, launch, pid_reaper):
    script = tmp_path / "w.py"
    script.write_text(
        "import os, time\n"
        f"open('{tmp_path}/pid_' + os.environ['LOCAL_RANK'], 'w').write(f'{{os.getpid()}}\\n')\n"
        "time.sleep(60)\n")
    p = launch(["--nproc_per_node=2", script])
    pids = [int(x) for x in wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])]
    pid_reaper.extend(pids)
    p.signal(signal.SIGKILL)
    p.wait(timeout=5)
    wait_for(lambda: not any(pid_alive(pid) for pid in pids), timeout=5,
             what=f"workers {pids} to die with ddprun")


def test_failing_worker_stops_job_promptly(tmp_path, launch, pid_reaper):
    # Rank 1 waits until rank 0 sleeps, records when it exits, then fails. The job must end
    # long before rank 0's sleep or the 30 s grace would; how fast is a speed target that
    # bench/launcher_bench.py measures (failure / latency, goal < 20 ms), not a test.
    script = (f'if [ "$LOCAL_RANK" = 0 ]; then echo $$ > {tmp_path}/pid_0; exec sleep 60; fi; '
              f'while [ ! -s {tmp_path}/pid_0 ]; do sleep 0.01; done; '
              f'date +%s.%N > {tmp_path}/exit_time; exit 5')
    p = launch(["--nproc_per_node=2", *sh(script)])
    rc = p.wait(timeout=20)
    ended = time.time()
    pid_reaper.append(int((tmp_path / "pid_0").read_text()))
    assert rc == 5, p.output()
    failed_at = float((tmp_path / "exit_time").read_text())
    assert ended - failed_at < 10, f"ddprun exited {ended - failed_at:.2f}s after the failure"
    assert not pid_alive(int((tmp_path / "pid_0").read_text()))


def test_a_worker_killed_by_a_signal_ddprun_did_not_send_while_stopping_is_a_failure(
        tmp_path, launch, pid_reaper):
    # Attack 77: scancel -s USR1 signals every process of the step; a worker that died of it
    # while ddprun stopped the group was logged "stopped by ddprun: signal 10 (SIGUSR1)", a
    # signal ddprun never sent. Rank 1 ignores ddprun's SIGTERM, so it dies of SIGUSR1 during
    # the stop every time.
    script = (f"trap '' TERM; echo $$ > {tmp_path}/pid_$LOCAL_RANK; "
              "while true; do sleep 0.1; done")
    p = launch(["--nproc_per_node=2", "--shutdown_timeout=30", *sh(script)])
    wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"], timeout=20)
    pids = [int((tmp_path / f"pid_{r}").read_text()) for r in (0, 1)]
    pid_reaper.extend(pids)
    os.kill(pids[0], signal.SIGUSR1)
    wait_for(lambda: "stopping the other workers" in p.stderr(), 20, what="the stop")
    os.kill(pids[1], signal.SIGUSR1)
    assert p.wait(timeout=20) == 128 + signal.SIGUSR1, p.output()
    err = p.stderr()
    assert "stopped by ddprun: signal 10" not in err, err
    failures = err[err.index("Failures:"):err.index("Root Cause")]
    assert "rank      : 1 (local_rank: 1)" in failures, err
    assert "SIGUSR1" in failures, err


@pytest.mark.parametrize("sig", [signal.SIGQUIT, signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_storm_during_shutdown_ends_in_128_plus_n(tmp_path, sig):
    """25 times: the worker finishes and, from that moment until ddprun exits, ddprun gets the
    signal as fast as it can be sent. ddprun must end with 0 (the signal came too late to count)
    or 128+N, never by the signal's default action (for SIGQUIT, a core dump)."""
    marker = tmp_path / "done"
    worker = f"open({str(marker)!r}, 'w').close()"
    codes = []
    for _ in range(25):
        marker.unlink(missing_ok=True)
        proc = subprocess.Popen([str(DDPRUN), "--nproc_per_node=1", "--no_python", PYTHON, "-c",
                                 worker], env=base_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                break
        codes.append(proc.wait(timeout=20))
    bad = [c for c in codes if c not in (0, 128 + sig)]
    assert not bad, f"exit codes {codes}: {bad} are neither 0 nor {128 + sig}"


# Saves a checkpoint for 2 s when SIGTERM comes, then exits 0.
CHECKPOINTS_ON_TERM = """
trap 'sleep 2; echo saved > {d}/saved_$LOCAL_RANK; exit 0' TERM
echo $$ > {d}/pid_$LOCAL_RANK
while :; do sleep 0.05; done
"""


def test_sigterm_burst_keeps_the_grace(tmp_path, launch, pid_reaper):
    """slurmstepd at the time limit: SIGTERM twice, 30 ms apart. The second must not skip the
    grace: the workers finish their 2 s checkpoint and ddprun exits 143."""
    p = launch(["--nproc_per_node=2", "--shutdown_timeout=20",
                *sh(CHECKPOINTS_ON_TERM.format(d=tmp_path))])
    pids = [int(x) for x in wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])]
    pid_reaper.extend(pids)
    p.signal(signal.SIGTERM)
    time.sleep(0.03)
    p.signal(signal.SIGTERM)
    assert p.wait(timeout=15) == 128 + signal.SIGTERM, p.output()
    assert (tmp_path / "saved_0").exists() and (tmp_path / "saved_1").exists(), p.output()
    assert "FAILED" not in p.stderr(), p.output()


def test_one_ctrl_c_delivered_twice_keeps_the_grace(tmp_path, launch, pid_reaper):
    """A Ctrl-C under `timeout --foreground`: the terminal signals ddprun's group and the wrapper
    passes the SIGINT on, so it comes twice within microseconds. That is one press: the workers
    keep their grace and finish their checkpoint (they were SIGKILLed at once: found by an
    attacking helper)."""
    p = launch(["--nproc_per_node=2", "--shutdown_timeout=20",
                *sh(CHECKPOINTS_ON_TERM.replace("TERM", "INT").format(d=tmp_path))])
    pids = [int(x) for x in wait_for_files([tmp_path / "pid_0", tmp_path / "pid_1"])]
    pid_reaper.extend(pids)
    p.signal(signal.SIGINT)
    p.signal(signal.SIGINT)
    assert p.wait(timeout=15) == 128 + signal.SIGINT, p.output()
    assert (tmp_path / "saved_0").exists() and (tmp_path / "saved_1").exists(), p.output()


def test_usr1_is_forwarded_inside_a_slurm_step(tmp_path, launch, pid_reaper):
    """`scancel -s USR1` inside a job step (SLURM_STEP_ID set), without --signals_to_handle:
    the workers get it and the job goes on (before: ddprun died of it, exit 138)."""
    p = launch(["--nproc_per_node=1", *sh(USR1_WORKER.format(d=tmp_path))],
               env=base_env(SLURM_STEP_ID="0", SLURM_JOB_ID="42"))
    pid = int(wait_for_files([tmp_path / "pid_0"])[0])
    pid_reaper.append(pid)
    p.signal(signal.SIGUSR1)
    assert p.wait(timeout=15) == 0, p.output()
    assert (tmp_path / "got_0").read_text().strip() == "USR1"


@pytest.mark.parametrize("given, warned", [("SIGTERM,SIGINT", "SIGUSR1 and SIGUSR2"),
                                           ("SIGTERM,SIGUSR1", "SIGUSR2"),
                                           ("SIGTERM,USR1,usr2", None)])
def test_a_signal_list_without_usr1_in_a_slurm_job_is_warned_of(given, warned):
    """--signals_to_handle without SIGUSR1/SIGUSR2 in a Slurm job: Slurm's warning ahead of a
    time limit (sbatch --signal=USR1@N) then kills ddprun and every worker by its default
    action; that was said nowhere (attack 84)."""
    r = run_ddprun(["--nproc_per_node=1", f"--signals_to_handle={given}", *sh("exit 0")],
                   env=base_env(SLURM_JOB_ID="42"))
    assert r.rc == 0, r
    said = [ln for ln in r.stderr.splitlines() if "--signals_to_handle leaves out" in ln]
    if warned is None:
        assert not said, r.stderr
    else:
        assert len(said) == 1 and f"leaves out {warned}: Slurm sends these" in said[0], r.stderr


def test_usr1_before_any_worker_is_told_and_the_job_goes_on(launch):
    """SIGUSR1 while the rendezvous waits (no worker yet): told, not passed on, the job goes on
    (it was dropped without a word)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = launch(["--nnodes=2", "--node_rank=0", f"--master_port={port}",
                "--rdzv_conf=join_timeout=30", "--signals_to_handle=SIGTERM,SIGUSR1",
                *sh("exit 0")])
    time.sleep(1)  # waiting for node 1 (the fault's moment, not an event)
    p.signal(signal.SIGUSR1)
    wait_for(lambda: "received SIGUSR1 while no workers run" in p.stderr(), 10,
             what="SIGUSR1 told")
    assert p.proc.poll() is None, p.output()  # still waiting for node 1
    p.signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 128 + signal.SIGTERM, p.output()
