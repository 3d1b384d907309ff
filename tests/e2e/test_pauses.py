"""Pauses are not hangs: time in which the job could not run (the whole job stopped or frozen, as
by Slurm's scontrol suspend or a cgroup freezer; one worker stopped, as by a debugger; Ctrl-Z in
a shell) does not count toward --hang_timeout, and Ctrl-Z stops the workers with ddprun."""
import os
import pty
import re
import signal
import subprocess
import textwrap
import threading
import time

import pytest

from conftest import DDPRUN, PYTHON, base_env, freeze_job, run_ddprun, sh, wait_for

# A worker that beats every 0.2 s for about 5 s of running, then exits 0.
BEATING = sh('i=0; while [ $i -lt 25 ]; do touch "$DDPRUN_HEARTBEAT_FILE"; sleep 0.2; '
             'i=$((i+1)); done; echo "rank $RANK done"')


def state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def stopped(pid):
    """'T' when stopped; also when the shell waits in vfork (state D) for a child that the stop
    caught before its exec: the shell cannot stop before its child does, and is held by it."""
    s = state(pid)
    if s != "D":
        return s
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = [int(c) for c in f.read().split()]
    return "T" if children and all(state(c) == "T" for c in children) else s


def workers_of(ddprun_pid, count):
    """The pids of ddprun's `count` worker processes (its children running /bin/sh)."""
    def found():
        with open(f"/proc/{ddprun_pid}/task/{ddprun_pid}/children") as f:
            children = [int(p) for p in f.read().split()]
        shells = []
        for pid in children:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "sh":
                        shells.append(pid)
            except FileNotFoundError:
                pass
        return shells if len(shells) == count else None
    return wait_for(found, timeout=20, what=f"{count} workers of ddprun {ddprun_pid}")


def test_a_job_frozen_whole_is_not_hung_when_it_continues(launch):
    # Frozen workers first, then ddprun; ddprun continued first, so it looks at beats from
    # before the freeze before any worker can beat again (the worst order for it).
    p = launch(["--nproc_per_node=2", "--hang_timeout=2", *BEATING])
    workers_of(p.pid, 2)
    time.sleep(1)
    freeze_job(p.pid, 5)
    assert p.wait(timeout=60) == 0, p.output()
    err = p.stderr()
    assert "hung" not in err, p.output()
    assert "ddprun itself did not run for" in err, p.output()
    assert sorted(p.stdout().split("\n"))[-2:] == ["rank 0 done", "rank 1 done"], p.output()


def test_a_stopped_worker_pauses_the_hang_limits_of_the_job(launch):
    p = launch(["--nproc_per_node=2", "--hang_timeout=2", *BEATING])
    workers = workers_of(p.pid, 2)
    time.sleep(1)
    os.kill(workers[1], signal.SIGSTOP)  # a debugger's stop, or a user's
    time.sleep(5)
    os.kill(workers[1], signal.SIGCONT)
    assert p.wait(timeout=60) == 0, p.output()
    err = p.stderr()
    assert "hung" not in err, p.output()
    assert (f"pid {workers[1]}) is stopped by a signal (SIGSTOP): the job waits for it "
            f"(kill -CONT {workers[1]} continues it)") in err, p.output()
    assert f"pid {workers[1]} runs again after" in err, p.output()


def stopped_for_5_s_then_done(p, pid):
    """Stops `pid` (below a worker of ddprun `p`, --hang_timeout=2) a second from now for 5 s;
    the job must end well, with no hang: returns ddprun's stderr."""
    time.sleep(1)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(5)
    os.kill(pid, signal.SIGCONT)
    assert p.wait(timeout=60) == 0, p.output()
    err = p.stderr()
    assert "hung" not in err, p.output()
    return err


def test_a_worker_whose_program_is_stopped_under_a_wrapper_is_not_hung(launch, tmp_path):
    # Attack 79: a wrapper script that runs the trainer without exec; the trainer stopped (a
    # debugger) was declared hung and the job killed: only the wrapper's state was looked at.
    inner = tmp_path / "inner.sh"
    inner.write_text('i=0; while [ $i -lt 25 ]; do touch "$DDPRUN_HEARTBEAT_FILE"; sleep 0.2; '
                     'i=$((i+1)); done\n')
    p = launch(["--nproc_per_node=2", "--hang_timeout=2", "--no_python", "/bin/sh", "-c",
                f"/bin/sh {inner}; echo wrapper done"])
    wrappers = workers_of(p.pid, 2)
    program = wait_for(lambda: [int(c) for c in open(
        f"/proc/{wrappers[1]}/task/{wrappers[1]}/children").read().split()], timeout=20,
                       what="rank 1's program")[0]
    err = stopped_for_5_s_then_done(p, program)
    assert (f"pid {wrappers[1]}) waits for pid {program} below it, which is stopped by a signal "
            f"(SIGSTOP)") in err, p.output()


# Rank 1 runs the beating loop as a child: it relays its output line by line (blocked in read),
# or waits polling the child's pipe (as torch.multiprocessing.spawn waits on its children).
RELAY = textwrap.dedent("""\
    import os, select, subprocess, sys
    loop = ('i=0; while [ $i -lt 25 ]; do touch "$DDPRUN_HEARTBEAT_FILE"; echo beat $i; '
            'sleep 0.2; i=$((i+1)); done')
    child = subprocess.Popen(["/bin/sh", "-c", loop], stdout=subprocess.PIPE)
    with open(os.path.join(os.environ["OUT_DIR"], f"child.{os.environ['RANK']}"), "w") as f:
        f.write(str(child.pid))
    if os.environ["HOW"] == "poll":
        while select.select([child.stdout], [], [])[0] and child.stdout.readline():
            pass
    else:
        for line in child.stdout:
            sys.stdout.write(line.decode())
    sys.exit(child.wait())
    """)


@pytest.mark.parametrize("how", ["read", "poll"])
def test_a_worker_whose_child_is_stopped_while_it_relays_or_polls_is_not_hung(launch, tmp_path,
                                                                              how):
    """Attack 116: only a wrapper blocked in wait4 was looked into; a relay reading its child's
    output, or a parent polling its pipes (mp.spawn), had its stopped child's time counted: the
    job was declared hung (exit 124) and the verdict blamed the collective."""
    script = tmp_path / "relay.py"
    script.write_text(RELAY)
    p = launch(["--nproc_per_node=2", "--hang_timeout=2", "--no_python", PYTHON, str(script)],
               env=base_env(HOW=how, OUT_DIR=str(tmp_path)))
    child = int(wait_for(lambda: (tmp_path / "child.1").exists() and
                         (tmp_path / "child.1").read_text(), timeout=30, what="rank 1's child"))
    err = stopped_for_5_s_then_done(p, child)
    assert re.search(rf"\(local_rank 1, pid \d+\) waits for pid {child} below it, which is "
                     r"stopped by a signal \(SIGSTOP\)", err), p.output()


@pytest.mark.parametrize("blocked", ["read", "poll"])
def test_a_stopped_helper_beside_a_real_hang_does_not_hide_it(tmp_path, blocked):
    """Attack 118: rank 1 stops a helper of its own, then hangs waiting for input the helper
    does not write (a FIFO, a socket); its wait was taken for the helper's and the job held
    for ever. The hang is found at --hang_timeout."""
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent("""\
        import os, select, signal, socket, subprocess, sys, time
        beat = os.environ["DDPRUN_HEARTBEAT_FILE"]
        for _ in range(3):
            os.utime(beat) if os.path.exists(beat) else open(beat, "a").close()
            time.sleep(0.2)
        if os.environ["RANK"] == "1":
            helper = subprocess.Popen(["sleep", "60"])
            os.kill(helper.pid, signal.SIGSTOP)
            a, b = socket.socketpair()
            if sys.argv[1] == "poll":
                select.select([a], [], [])
            else:
                a.recv(1)
        time.sleep(30)
        """))
    r = run_ddprun(["--nproc_per_node=2", "--hang_timeout=3", "--no_python", PYTHON, script,
                    blocked], timeout=60)
    assert r.rc == 124, r
    assert re.search(r"rank 1 \(local_rank 1, pid \d+\) hung: no heartbeat", r.stderr), r
    assert "below it, which is stopped" not in r.stderr, r


def test_a_stopped_worker_is_continued_when_the_group_stops_so_it_sees_sigterm(launch):
    """Rank 1 stopped (SIGSTOP), rank 0 fails: the group's SIGTERM reaches a stopped worker
    only once it is continued, and ddprun sat out the whole --shutdown_timeout before its
    SIGKILL (found by an attacking helper)."""
    script = ('if [ "$LOCAL_RANK" = 0 ]; then sleep 2; exit 3; fi; '
              'trap "echo rank 1 got SIGTERM; exit 143" TERM; while :; do sleep 0.1; done')
    p = launch(["--nproc_per_node=2", "--shutdown_timeout=60", *sh(script)])
    workers = workers_of(p.pid, 2)
    time.sleep(0.5)  # its trap is set
    os.kill(workers[1], signal.SIGSTOP)
    start = time.monotonic()
    assert p.wait(timeout=90) == 3, p.output()
    assert time.monotonic() - start < 20, p.output()  # not the 60 s grace
    assert "rank 1 got SIGTERM" in p.stdout(), p.output()


def test_a_worker_that_hangs_after_a_pause_is_still_hung(launch):
    # The pause is left out, not the silence after it: rank 1 stops beating once continued.
    script = sh('i=0; while [ $i -lt 5 ]; do touch "$DDPRUN_HEARTBEAT_FILE"; sleep 0.2; '
                'i=$((i+1)); done; if [ "$RANK" = 1 ]; then sleep 300; fi')
    p = launch(["--nproc_per_node=2", "--hang_timeout=2", "--shutdown_timeout=1", *script])
    workers = workers_of(p.pid, 2)
    os.kill(workers[1], signal.SIGSTOP)
    time.sleep(3)
    os.kill(workers[1], signal.SIGCONT)
    continued = time.monotonic()
    assert p.wait(timeout=60) == 124, p.output()
    assert time.monotonic() - continued < 2 + 20, p.output()
    assert "rank 1 (local_rank 1" in p.stderr() and "hung: no heartbeat" in p.stderr(), \
        p.output()


class Terminal:
    """An interactive bash on a pseudo-terminal, with job control, as a user types into it."""

    def __init__(self, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.text = ""
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            with self.lock:
                self.text += chunk.decode(errors="replace")

    def type(self, keys):
        os.write(self.fd, keys.encode())

    def seen(self, needle):
        with self.lock:
            return needle in self.text

    def matches(self, pattern):
        with self.lock:
            return re.search(pattern, self.text) is not None

    def fg_until_done(self):
        """Brings the job to the foreground and waits for it to end; returns its exit status."""
        self.type("fg\n")
        self.type("echo ddprun-rc=$?\n")
        # The terminal echoes the typed "ddprun-rc=$?" at once; the shell's answer has digits.
        wait_for(lambda: self.matches(r"ddprun-rc=\d+\r?\n"), timeout=60,
                 what=f"ddprun's end\n{self.text}")
        return int(re.search(r"ddprun-rc=(\d+)\r?\n", self.text).group(1))

    def close(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def test_ctrl_z_stops_the_workers_with_ddprun_and_fg_continues_them(tmp_path):
    env = base_env(PS1="$ ", TERM="dumb")
    term = Terminal(env)
    try:
        command = " ".join(f"'{a}'" for a in [str(DDPRUN), "--nproc_per_node=2",
                                               "--hang_timeout=2", f"--log_dir={tmp_path}",
                                               *BEATING])
        term.type(command + "\n")
        ddprun = wait_for(lambda: subprocess.run(["pgrep", "-f", f"log_dir={tmp_path}"],
                                                 capture_output=True, text=True).stdout.split(),
                          timeout=20, what="ddprun started")
        pid = int(ddprun[0])
        workers = workers_of(pid, 2)
        time.sleep(1)
        term.type("\x1a")  # Ctrl-Z
        wait_for(lambda: term.seen("Stopped"), timeout=20, what=f"bash's 'Stopped'\n{term.text}")
        assert state(pid) == "T", term.text
        assert [stopped(w) for w in workers] == ["T", "T"], term.text
        time.sleep(3)  # past --hang_timeout, stopped
        assert [stopped(w) for w in workers] == ["T", "T"], term.text
        rc = term.fg_until_done()
    finally:
        term.close()
    text = term.text.replace("\r", "")
    assert rc == 0, text
    assert "SIGTSTP: 2 worker(s) stop with ddprun" in text, text
    assert re.search(r"continued after \d+\.\d s stopped: 2 worker\(s\) continue", text), text
    assert "hung" not in text, text
    assert "rank 0 done" in text and "rank 1 done" in text, text


def test_a_background_ddprun_under_stty_tostop_is_stopped_by_its_output_and_fg_continues(
        tmp_path):
    """`stty tostop`: a background job that writes to the terminal is stopped (SIGTTOU), as
    torchrun is. ddprun's console thread blocked SIGTTOU, which lets the kernel pass its
    writes: it kept printing over the shell."""
    env = base_env(PS1="$ ", TERM="dumb")
    term = Terminal(env)
    try:
        term.type("stty tostop\n")
        command = " ".join(f"'{a}'" for a in [str(DDPRUN), "--nproc_per_node=1", "--tee=3",
                                               f"--log_dir={tmp_path}", *sh("echo worker-said-$((6*7))")])
        term.type(command + " &\n")
        pid = int(wait_for(lambda: subprocess.run(["pgrep", "-f", f"log_dir={tmp_path}"],
                                                  capture_output=True, text=True).stdout.split(),
                           timeout=20, what="ddprun started")[0])
        wait_for(lambda: os.path.exists(f"/proc/{pid}") and state(pid) == "T", timeout=20,
                 what=f"ddprun stopped by its output (SIGTTOU)\n{term.text}")
        assert "worker-said-42" not in term.text, term.text
        term.type("jobs -l\n")
        wait_for(lambda: term.seen("Stopped (tty output)"), timeout=20,
                 what=f"bash's 'Stopped (tty output)'\n{term.text}")
        rc = term.fg_until_done()
    finally:
        term.close()
    text = term.text.replace("\r", "")
    assert rc == 0, text
    assert "worker-said-42" in text, text


def test_a_worker_stopped_before_ctrl_z_stays_stopped_after_it(tmp_path):
    """SIGTSTP stops the running workers and continues those alone: one the user had stopped
    (at a breakpoint, say) is not continued by the job's SIGCONT."""
    # A process group of its own whose parent (this test) is in the same session: not orphaned,
    # so SIGTSTP stops ddprun as it would in a shell.
    p = subprocess.Popen([str(DDPRUN), "--nproc_per_node=2", f"--log_dir={tmp_path}", *BEATING],
                         env=base_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, process_group=0)
    try:
        workers = workers_of(p.pid, 2)
        os.kill(workers[1], signal.SIGSTOP)  # the user's stop (before Ctrl-Z, not as it comes)
        wait_for(lambda: state(workers[1]) == "T", timeout=20, what="the user's stop")
        p.send_signal(signal.SIGTSTP)
        wait_for(lambda: state(p.pid) == "T" and stopped(workers[0]) == "T", timeout=20,
                 what="ddprun and rank 0 stopped")
        p.send_signal(signal.SIGCONT)
        wait_for(lambda: state(workers[0]) != "T", timeout=20, what="rank 0 continued")
        time.sleep(1)
        assert state(workers[1]) == "T"  # still the user's to continue
        os.kill(workers[1], signal.SIGCONT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:  # a failed wait: ddprun's own account shows with the failure
            p.kill()
            print("ddprun's stderr:", p.communicate()[1])
    assert p.returncode == 0, err
    assert "SIGTSTP: 1 worker(s) stop with ddprun" in err, err
    assert sorted(re.findall(r"rank (\d) done", out)) == ["0", "1"], out

