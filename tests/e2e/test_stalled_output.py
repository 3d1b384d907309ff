"""Output that cannot be written never stops supervision: a console nobody reads drops lines that a
log file keeps (counted, with a notice) and holds the others (the worker waits to write, the hang
limits wait with it) instead of stalling the launcher; at exit, what no log file keeps is waited
for (a signal gives it up), the rest given up after 5 s; a console that is a regular file never
drops a line; a log file that cannot be written (full disk) is reported once, named, in the
failure report, and in the exit code."""

import os
import re
import shutil
import signal
import subprocess
import textwrap
import threading
import time

import pytest

from conftest import DDPRUN, PYTHON, base_env

# Rank 0 fails with exit 7 after a second; the others print as fast as they can and note when
# SIGTERM reached them.
CHATTY = textwrap.dedent("""\
    import os, signal, sys, time
    d = os.environ["OUT_DIR"]
    rank = int(os.environ["RANK"])
    def note(name):  # whole when it appears: the test reads it as soon as it exists
        with open(f"{d}/{name}.tmp", "w") as f:
            f.write(repr(time.time()))
        os.replace(f"{d}/{name}.tmp", f"{d}/{name}")
    def on_term(sig, frame):
        note(f"term.{rank}")
        os._exit(143)
    signal.signal(signal.SIGTERM, on_term)
    start = time.time()
    if rank == 0 and os.environ.get("FAIL") == "1":
        time.sleep(1.0)
        note("failed")
        sys.exit(7)
    n = 0
    limit = float(os.environ.get("PRINT_FOR", "1e9"))
    lines = int(os.environ.get("LINES", "0")) or float("inf")
    out = sys.stderr if os.environ.get("STREAM") == "stderr" else sys.stdout
    while time.time() - start < limit and n < lines:
        n += 1
        print(f"rank {rank} line {n} " + "x" * 80, file=out, flush=(n % 64 == 0))
        if n % 64 == 0 and os.environ.get("SLOW") == "1":
            time.sleep(0.002)
    print(f"rank {rank} done after {n} lines", file=out, flush=True)
    """)


def start(tmp_path, args, **env):
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    out_dir = tmp_path / "out"
    out_dir.mkdir(exist_ok=True)
    e = base_env(OUT_DIR=str(out_dir), **env)
    proc = subprocess.Popen([str(DDPRUN), *args, "--no_python", PYTHON, str(script)], env=e,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    return proc, out_dir


def wait_file(path, timeout):
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def exit_unread(proc, timeout):
    """Waits up to `timeout` for ddprun to exit while nobody reads its output; its rc or None."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll()


# Output a log file keeps (dropped on a stalled console) and output kept nowhere else (held).
KEPT_OR_HELD = [pytest.param(["--tee=3"], {}, id="kept"),
                pytest.param([], {"STREAM": "stderr"}, id="held")]


@pytest.mark.parametrize("args,env", KEPT_OR_HELD)
def test_unread_console_does_not_delay_failure_handling(tmp_path, args, env):
    """Nobody reads ddprun's stdout or stderr: a worker that fails at +1 s still gets its
    neighbours SIGTERMed at once. Where log files keep the output, ddprun exits with its code
    before anyone reads; where nothing else keeps it, ddprun waits for its console (it used to
    give the output up after 5 s without a word: found by an attacking helper), and whoever reads
    then gets it all, the failure report last."""
    proc, out = start(tmp_path, ["--nproc_per_node=2", *args, "--log_dir", tmp_path / "logs",
                                 "--shutdown_timeout=5"], FAIL="1", **env)
    try:
        assert wait_file(out / "failed", 20), "rank 0 never failed"
        failed_at = float((out / "failed").read_text())
        assert wait_file(out / "term.1", 10), "the failure was not acted on within 10 s"
        lag = float((out / "term.1").read_text()) - failed_at
        rc = exit_unread(proc, 15 if args else 9)
        if not args:
            assert rc is None, "ddprun exited while output no log file keeps was unread"
            out_text, err_text = proc.communicate(timeout=60)
            rc = proc.returncode
            err = err_text.decode(errors="replace")
            assert "Root Cause (first observed failure)" in err, err[-2000:]
            assert err.count("rank 1 line ") > 1000, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert lag < 3.0, f"rank 1 got SIGTERM {lag:.1f} s after rank 0 failed"
    assert rc == 7, f"ddprun did not exit (rc {rc}) while its console was not read"
    if args:  # the log file is complete: rank 1's last line there is its last before SIGTERM
        log = (tmp_path / "logs").glob("*/attempt_0/1/stdout.log")
        assert any(p.stat().st_size > 64 * 1024 for p in log)


def test_console_that_resumes_gets_a_counted_notice(tmp_path):
    """The console stops reading for 3 s while ranks print, then reads again: the lines it missed
    are counted in a notice that names the log to read them in; the log files hold every line."""
    proc, out = start(tmp_path, ["--nproc_per_node=1", "--tee=3", "--log_dir", tmp_path / "logs"],
                      PRINT_FOR="5")
    time.sleep(3.0)
    out_text, err_text = proc.communicate(timeout=30)
    assert proc.returncode == 0, err_text.decode(errors="replace")
    text = out_text.decode(errors="replace")
    logs = list((tmp_path / "logs").glob("*/attempt_0/0/stdout.log"))
    assert logs, "no stdout.log"
    log_lines = logs[0].read_text().splitlines()
    assert log_lines[-1].startswith("rank 0 done after"), log_lines[-1]
    total = int(log_lines[-1].split()[4])
    assert len(log_lines) == total + 1, "the log file lost lines"
    # After the stall, a reader slower than the worker (a loaded machine) is told apart:
    # "console slower than the workers". Both count lines not shown.
    notices = [line for line in text.splitlines() if "lines not shown: console " in line]
    assert notices, "no notice of dropped lines"
    assert "console not reading" in notices[0] and "stdout.log" in notices[0], notices[0]
    shown = sum(1 for line in text.splitlines() if " line " in line and "rank 0" in line)
    missed = sum(int(n.split("[ddprun: ")[1].split()[0]) for n in notices)
    assert shown + missed == total, f"shown {shown} + missed {missed} != printed {total}"


def numbered_lines(text, rank):
    """The line numbers rank `rank` printed, in the order shown, and its 'done after' count."""
    numbers, total = [], None
    for line in text.splitlines():
        if line.startswith(f"rank {rank} line "):
            numbers.append(int(line.split()[3]))
        elif line.startswith(f"rank {rank} done after "):
            total = int(line.split()[4])
    return numbers, total


def test_output_kept_nowhere_else_waits_for_the_console(tmp_path):
    """No log file: a worker's stderr, read by ddprun for the failure report, is held while the
    console does not read (3 s; 20 MB printed against a 4 MiB queue) and every line arrives, in
    order, once it reads again: nothing dropped, no notice."""
    proc, out = start(tmp_path, ["--nproc_per_node=1"], STREAM="stderr", LINES="200000")
    time.sleep(3.0)
    out_text, err_text = proc.communicate(timeout=60)
    text = err_text.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    numbers, total = numbered_lines(text, 0)
    assert total == 200000, text[-2000:]
    assert numbers == list(range(1, total + 1)), "lines lost or out of order"
    assert "lines not shown" not in text


def test_teed_output_with_log_files_off_waits_for_the_console(tmp_path):
    """Attack 78: --tee with --log_dir=/dev/null keeps the output nowhere but on the console, yet
    its lines were dropped as if a log file kept them ("... not shown ...; see /dev/null")."""
    proc, out = start(tmp_path, ["--nproc_per_node=1", "--tee=3", "--log_dir=/dev/null"],
                      LINES="200000")
    time.sleep(3.0)
    out_text, err_text = proc.communicate(timeout=60)
    text = out_text.decode(errors="replace")
    assert proc.returncode == 0, err_text.decode(errors="replace")[-3000:]
    numbers, total = numbered_lines(text.replace("[default0]:", ""), 0)
    assert total == 200000, text[-2000:]
    assert numbers == list(range(1, total + 1)), "lines lost or out of order"
    assert "lines not shown" not in text + err_text.decode(errors="replace")


@pytest.mark.parametrize("args,env", KEPT_OR_HELD)
def test_the_failure_report_survives_a_console_full_of_worker_output(tmp_path, args, env):
    """Rank 1 fills the console queue while nobody reads; rank 0 fails meanwhile. Once the console
    reads again (after 3 s) it gets the failure report: the launcher's own lines are not lost
    to the workers' output."""
    proc, out = start(tmp_path, ["--nproc_per_node=2", *args, "--log_dir", tmp_path / "logs"],
                      FAIL="1", **env)
    time.sleep(3.0)
    out_text, err_text = proc.communicate(timeout=60)
    err = err_text.decode(errors="replace")
    assert proc.returncode == 7, err[-3000:]
    assert "Root Cause (first observed failure)" in err, err[-3000:]
    assert "exitcode  : 7 " in err, err[-3000:]


def test_held_output_does_not_count_toward_the_hang_limits(tmp_path):
    """--hang_detect=output with a 2 s limit: a console that stalls 5 s holds the worker's lines
    (nowhere else keeps them), so the worker is silent for longer than the limit; it is not
    hung: ddprun says it waits for the console, and the run ends well with every line shown."""
    proc, out = start(tmp_path, ["--nproc_per_node=1", "--hang_detect=output",
                                 "--hang_timeout=2"], PRINT_FOR="7", SLOW="1")
    time.sleep(5.0)
    out_text, err_text = proc.communicate(timeout=60)
    text, err = out_text.decode(errors="replace"), err_text.decode(errors="replace")
    assert proc.returncode == 0, err[-3000:]
    assert "waits to write its output (ddprun holds it" in err, err[-3000:]
    assert "the console reads again after" in err, err[-3000:]
    numbers, total = numbered_lines(text, 0)
    assert total and numbers == list(range(1, total + 1)), "lines lost or out of order"


# Beats, then writes to its stdout (ddprun's, inherited) in one of three ways, and says so.
BEATING = textwrap.dedent("""\
    import os, subprocess, sys, time
    os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
    how = os.environ["HOW"]
    if how == "print":  # a beat per line, from the thread that prints
        start, n = time.time(), 0
        while time.time() - start < 7:
            n += 1
            os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
            sys.stdout.write(f"line {n} " + "x" * 100 + "\\n")
            if n % 64 == 0:
                sys.stdout.flush()
                time.sleep(0.002)
    elif how == "child":  # a tool the worker runs writes 3 MB; the worker waits for it
        subprocess.run(["head", "-c", "3000000", "/dev/zero"], check=True)
    elif how == "thread":  # a writer thread writes 3 MB; the main thread waits for it
        import threading
        def write():
            view = memoryview(bytes(3000000))
            while view:
                view = view[os.write(1, view):]
        writer = threading.Thread(target=write, name="writer")
        writer.start()
        writer.join()
    else:  # sendfile from a 3 MB file
        path = os.path.join(os.environ["OUT_DIR"], "zeros")
        with open(path, "wb") as f:
            f.write(bytes(3000000))
        with open(path, "rb") as f:
            sent = 0
            while sent < 3000000:
                sent += os.sendfile(1, f.fileno(), sent, 3000000 - sent)
    sys.stdout.write("\\nDONE\\n")
    """)


@pytest.mark.parametrize("how, waits", [
    ("print", "waits to write to fd 1, ddprun's console, which it writes to directly"),
    ("child", "which waits to write to fd 1, ddprun's console (inherited)"),
    ("sendfile", "waits to write to fd 1, ddprun's console, which it writes to directly"),
    ("thread", ") to write to fd 1, ddprun's console, which it writes to directly"),
])
def test_a_worker_blocked_on_the_console_itself_is_not_hung(tmp_path, how, waits):
    """A worker writes straight to ddprun's stdout (inherited, not read by ddprun), which nobody
    reads for 5 s: its main thread waits in write() (or sendfile, or for a child of its own that
    writes) longer than --hang_timeout=2, and the job waits with it; ddprun sees where it waits,
    says so, and does not call it hung; the same when a thread other than the main one writes
    and the main one waits for it. Every byte arrives."""
    script = tmp_path / "beating.py"
    script.write_text(BEATING)
    proc = subprocess.Popen([str(DDPRUN), "--nproc_per_node=1", "--hang_timeout=2",
                             "--no_python", PYTHON, str(script)],
                            env=base_env(HOW=how, OUT_DIR=str(tmp_path)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(5.0)
    out_text, err_text = proc.communicate(timeout=60)
    err = err_text.decode(errors="replace")
    assert proc.returncode == 0, err[-3000:]
    assert waits in err, err
    if how == "print":  # (the others may end before ddprun looks again)
        assert "the console reads again after" in err, err
    assert out_text.endswith(b"\nDONE\n")
    if how == "print":
        numbers = [int(line.split()[1]) for line in out_text.decode().splitlines()
                   if line.startswith("line ")]
        assert numbers == list(range(1, len(numbers) + 1))
    else:
        assert len(out_text) == 3000000 + len(b"\nDONE\n")


# Rank 0 prints for 9 s; rank 1 notes its pid, then prints a line every 0.2 s.
PRINTER_AND_STOPPED = textwrap.dedent("""\
    import os, sys, time
    rank = int(os.environ["RANK"])
    if rank == 1:
        with open(os.path.join(os.environ["OUT_DIR"], "pid1.tmp"), "w") as f:
            f.write(str(os.getpid()))
        os.replace(os.path.join(os.environ["OUT_DIR"], "pid1.tmp"),
                   os.path.join(os.environ["OUT_DIR"], "pid1"))
    start, n = time.time(), 0
    while time.time() - start < 9:
        n += 1
        print(f"rank {rank} line {n} " + "x" * 80, flush=True)
        if rank == 1:
            time.sleep(0.2)
    """)


def test_the_console_reading_again_while_a_rank_is_stopped_says_the_job_still_waits(tmp_path):
    """Rank 0 waits for a console nobody reads, rank 1 is stopped (SIGSTOP) meanwhile; the console
    reads again while rank 1 is still stopped. It said "the hang limits count again", which was
    not so: rank 1 still held the job."""
    script = tmp_path / "two.py"
    script.write_text(PRINTER_AND_STOPPED)
    proc = subprocess.Popen([str(DDPRUN), "--nproc_per_node=2", "--hang_detect=output",
                             "--hang_timeout=3", "--no_python", PYTHON, str(script)],
                            env=base_env(OUT_DIR=str(tmp_path)), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert wait_file(tmp_path / "pid1", 30), "rank 1 did not start"
        pid1 = int((tmp_path / "pid1").read_text())
        time.sleep(1.0)
        os.kill(pid1, signal.SIGSTOP)
        time.sleep(3.0)  # the console stalls (nobody reads stdout) with rank 1 stopped
        drained = []
        reader = threading.Thread(target=lambda: drained.append(proc.stdout.read()))
        reader.start()
        time.sleep(3.0)  # the console reads again; rank 1 still stopped
        os.kill(pid1, signal.SIGCONT)
        err = proc.stderr.read().decode(errors="replace")
        proc.wait(timeout=60)
        reader.join(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-3000:]
    m = re.search(r"the console reads again after [\d.]+ s(.*)", err)
    assert m, err[-3000:]
    assert m.group(1) == "; the job still waits (see above)", err[-3000:]
    assert re.search(rf"pid {pid1} runs again after [\d.]+ s stopped; the hang limits count again",
                     err), err[-3000:]


# Each rank writes numbered lines to stdout and stderr in turn, with one write(2) per line.
TWO_STREAMS = textwrap.dedent("""\
    import os
    r = os.environ["RANK"]
    for i in range(int(os.environ["LINES"])):
        os.write(1, f"R{r} out {i} {'x' * 100}\\n".encode())
        os.write(2, f"R{r} err {i} {'x' * 100}\\n".encode())
    open(os.path.join(os.environ["OUT_DIR"], "done." + r), "w").close()
    """)


def start_two_streams(tmp_path, lines, merged, args=()):
    script = tmp_path / "two_streams.py"
    script.write_text(TWO_STREAMS)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen([str(DDPRUN), "--nproc_per_node=2", "--hang_detect=output",
                             "--hang_timeout=3", *args, "--no_python", PYTHON, str(script)],
                            env=base_env(OUT_DIR=str(out_dir), LINES=str(lines)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                            start_new_session=True)
    return proc, out_dir


def test_launcher_lines_never_split_a_worker_line_on_one_console(tmp_path):
    """`ddprun ... 2>&1 | less`: stdout and stderr one pipe, unread for 5 s while both ranks write
    both streams: ddprun's own lines (the warning that they wait, the notice that the console
    reads again) start lines of their own, and every worker line arrives whole."""
    proc, _ = start_two_streams(tmp_path, 50000, merged=True)
    time.sleep(5.0)
    text = proc.communicate(timeout=60)[0].decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    lines = text.splitlines()
    split = [line[:120] for line in lines if "[ddprun " in line and not line.startswith("[ddprun ")]
    assert not split, split[:3]
    whole = sum(1 for line in lines if re.fullmatch(r"R[01] (out|err) \d+ x{100}", line))
    assert whole == 4 * 50000
    assert "waits to write its output (ddprun holds it" in text


def test_exit_waits_once_for_both_unread_streams(tmp_path):
    """stdout and stderr two pipes, both never read, output that log files keep queued on each:
    once the workers are done ddprun gives both up together after 5 s without progress (it
    waited 5 s for each in turn), and exits 0."""
    proc, out_dir = start_two_streams(tmp_path, 8000, merged=False,
                                      args=["--tee=3", f"--log_dir={tmp_path / 'logs'}"])
    try:
        assert wait_file(out_dir / "done.0", 30) and wait_file(out_dir / "done.1", 30)
        done = time.monotonic()
        rc = exit_unread(proc, 20)
        waited = time.monotonic() - done
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert rc == 0
    assert 4.0 < waited < 8.0, f"ddprun exited {waited:.1f} s after the workers"


def test_output_given_up_at_exit_is_said_on_the_stream_that_reads(tmp_path):
    """stdout never read, stderr a file: the output queued for stdout that log files keep is given
    up 5 s after the workers, as before, but now said on stderr (it went without a word; found
    by an attacking helper)."""
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    (tmp_path / "out").mkdir()
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([str(DDPRUN), "--nproc_per_node=1", "--tee=3",
                                 f"--log_dir={tmp_path / 'logs'}", "--no_python", PYTHON,
                                 str(script)],
                                env=base_env(OUT_DIR=str(tmp_path / "out"), LINES="100000"),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True)
        try:
            rc = exit_unread(proc, 60)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert rc == 0
    said = err_path.read_text(errors="replace")
    assert re.search(r"ddprun: its stdout has taken nothing for 5 s: the \d+ bytes of output "
                     r"queued for it are not shown \(the log files keep them\)", said), said[-2000:]


def test_exit_waits_for_unread_output_that_nothing_else_keeps(tmp_path):
    """The same without log files: ddprun waits for its consoles past the 5 s, and a reader that
    comes 8 s late gets every line of both streams (they used to be given up without a word)."""
    proc, out_dir = start_two_streams(tmp_path, 8000, merged=False)
    try:
        assert wait_file(out_dir / "done.0", 30) and wait_file(out_dir / "done.1", 30)
        assert exit_unread(proc, 8) is None, "ddprun gave up output that nothing else keeps"
        out_text, err_text = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    for name, text in (("out", out_text), ("err", err_text)):
        lines = text.decode(errors="replace").splitlines()
        for r in (0, 1):
            got = sum(1 for line in lines if line.startswith(f"R{r} {name} "))
            assert got == 8000, f"rank {r}'s {name}: {got} of 8000 lines"


@pytest.mark.parametrize("args,env", KEPT_OR_HELD)
def test_sigterm_is_acted_on_while_the_console_is_stalled(tmp_path, args, env):
    proc, out = start(tmp_path, ["--nproc_per_node=2", *args, "--log_dir", tmp_path / "logs"],
                      **env)
    try:
        time.sleep(2.0)  # the pipe is full by now
        proc.send_signal(signal.SIGTERM)
        assert wait_file(out / "term.0", 5), "SIGTERM was not passed on while the console stalled"
        rc = exit_unread(proc, 15)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert rc == 128 + signal.SIGTERM, rc


def run_on_full_disk(tmp_path, nproc, program):
    """ddprun --tee=3 with --log_dir on a 256 KiB tmpfs of its own (a private mount namespace),
    running the Python `program` in nproc workers."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs in a private namespace")
    logs = tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(program)
    cmd = (f"mount -t tmpfs -o size=256k ddprun-full {logs} && exec {DDPRUN} "
           f"--nproc_per_node={nproc} --tee=3 --log_dir {logs} --no_python {PYTHON} {script}")
    r = subprocess.run(["unshare", "--mount", "sh", "-c", cmd], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    if "mount:" in r.stderr or "unshare:" in r.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    return r


def test_full_disk_is_reported_and_in_the_exit_code(tmp_path):
    """--log_dir on a 256 KiB file system; the worker writes 2 MiB and succeeds: the log's
    failed write is named once, in the failure report, and the exit code is 74 (EX_IOERR)."""
    r = run_on_full_disk(tmp_path, 1, "import sys\nfor i in range(20000):\n    print('y' * 100)\n")
    assert r.returncode == 74, r.stderr
    assert r.stderr.count("No space left on device") >= 1, r.stderr
    assert "stdout.log is incomplete" in r.stderr, r.stderr
    assert r.stderr.count("is incomplete: write failed") == 1, r.stderr


def test_full_disk_counts_every_incomplete_log_file(tmp_path):
    """Two workers each fill both logs on a full file system: the closing line counts four
    incomplete files (one per file, not per worker) and every worker's output reached the
    console."""
    r = run_on_full_disk(tmp_path, 2, "import sys\nfor i in range(20000):\n    print('y' * 100)\n"
                         "    print('z' * 100, file=sys.stderr)\nprint('last line', flush=True)\n")
    assert r.returncode == 74, r.stderr[-3000:]
    assert r.stderr.count("is incomplete: write failed") == 4, r.stderr[-3000:]
    assert "but 4 log file(s) are incomplete" in r.stderr, r.stderr[-3000:]
    assert "3 more above" in r.stderr, r.stderr[-3000:]
    assert r.stdout.count("last line") == 2, r.stdout[-500:]


@pytest.mark.parametrize("args", [["--hang_detect=output"], ["--tee=3"]], ids=["read", "tee"])
def test_a_console_that_fails_writes_is_told_and_fails_a_good_job(args):
    """stdout is a full disk (/dev/full): ddprun's writes of the workers' output to it fail. It
    said nothing and exited 0 (found by an attacking helper); now it names the stream and the
    error, and a job that succeeded exits 74, as for an incomplete log file."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(DDPRUN), *args, "--no_python", PYTHON, "-c", "print('x')"],
                           env=base_env(), stdin=subprocess.DEVNULL, stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 74, r.stderr
    assert ("ddprun: writing to its stdout: No space left on device: what the workers wrote to "
            "it from then on is lost; exit code 74") in r.stderr, r.stderr
