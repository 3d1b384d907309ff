"""Console prefixing, tee/redirect files, log directory layout and error files."""

import json
import os
import re
import socket
import select
import signal
import subprocess
import time
from contextlib import contextmanager

import pytest

from conftest import DDPRUN, base_env, run_ddprun, run_dir, sh, wait_for, write_script
from trainlib import TRAIN, checksums

LINES = 2000
PAD = "x" * 60

# Prints LINES numbered lines on stdout and on stderr, then a last line without newline.
CHATTY = f"""
import os, sys
r = os.environ["LOCAL_RANK"]
for i in range({LINES}):
    print(f"out r{{r}} {{i}} {PAD}")
    print(f"err r{{r}} {{i}}", file=sys.stderr)
sys.stdout.write(f"tail r{{r}}")
sys.stderr.write(f"etail r{{r}}")
"""


def expected_out(rank):
    return "".join(f"out r{rank} {i} {PAD}\n" for i in range(LINES)) + f"tail r{rank}"


def expected_err(rank):
    return "".join(f"err r{rank} {i}\n" for i in range(LINES)) + f"etail r{rank}"


def prefixed(console, prefix):
    """Lines of console that start with prefix, prefix removed; checks that no other
    line carries a worker prefix in its middle."""
    out = []
    for line in console.splitlines():
        if line.startswith(prefix):
            out.append(line[len(prefix):])
    return out


def test_tee_prefixes_whole_lines_and_keeps_files(tmp_path):
    script = write_script(tmp_path, "chatty.py", CHATTY, executable=False)
    logs = tmp_path / "logs"
    r = run_ddprun(["--nproc_per_node=2", "--tee=3", f"--log_dir={logs}", script])
    assert r.rc == 0, r
    # stdout holds worker lines only, each with exactly one prefix at its start.
    for line in r.stdout.splitlines():
        assert re.fullmatch(rf"\[default([01])\]:(out r\1 \d+ {PAD}|tail r\1)", line), \
            f"bad console line {line!r}"
    for rank in (0, 1):
        assert "\n".join(prefixed(r.stdout, f"[default{rank}]:")) == expected_out(rank)
        assert "\n".join(prefixed(r.stderr, f"[default{rank}]:")) == expected_err(rank)
    for line in r.stderr.splitlines():
        if "r0 " in line or "r1 " in line or "tail r" in line:
            assert re.fullmatch(r"\[default([01])\]:(err r\1 \d+|etail r\1)", line), \
                f"bad console line {line!r}"
    attempt = run_dir(logs) / "attempt_0"
    for rank in (0, 1):
        assert (attempt / str(rank) / "stdout.log").read_text() == expected_out(rank)
        assert (attempt / str(rank) / "stderr.log").read_text() == expected_err(rank)


BOTH_STREAMS = 'echo "out $LOCAL_RANK"; echo "err $LOCAL_RANK" >&2'


def test_redirect_stdout_only(tmp_path):
    r = run_ddprun(["-r", "1", f"--log_dir={tmp_path}", *sh(BOTH_STREAMS)])
    assert r.rc == 0, r
    assert "out 0" not in r.stdout, r
    assert "err 0" in r.stderr.splitlines(), r  # not redirected: raw, no prefix
    rank_dir = run_dir(tmp_path) / "attempt_0" / "0"
    assert (rank_dir / "stdout.log").read_text() == "out 0\n"
    assert not (rank_dir / "stderr.log").exists()


def test_local_ranks_filter_shows_one_rank_but_writes_all_files(tmp_path):
    r = run_ddprun(["--nproc_per_node=2", "--tee=3", "--local_ranks_filter=1",
                    f"--log_dir={tmp_path}", *sh(BOTH_STREAMS)])
    assert r.rc == 0, r
    assert r.stdout.splitlines() == ["[default1]:out 1"], r
    assert "[default1]:err 1" in r.stderr.splitlines(), r
    assert "err 0" not in r.stderr, r
    attempt = run_dir(tmp_path) / "attempt_0"
    for rank in (0, 1):
        assert (attempt / str(rank) / "stdout.log").read_text() == f"out {rank}\n"
        assert (attempt / str(rank) / "stderr.log").read_text() == f"err {rank}\n"


def test_role_changes_prefix(tmp_path):
    r = run_ddprun(["--nproc_per_node=2", "--tee=1", "--role=trainer", f"--log_dir={tmp_path}",
                    *sh('echo "hi $ROLE_NAME"')])
    assert r.rc == 0, r
    assert sorted(r.stdout.splitlines()) == ["[trainer0]:hi trainer", "[trainer1]:hi trainer"], r


def test_prefix_template_from_env(tmp_path):
    env = base_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${rank}@${host}]:")
    r = run_ddprun(["--nproc_per_node=2", "--tee=1", f"--log_dir={tmp_path}", *sh("echo hi")],
                   env=env)
    assert r.rc == 0, r
    host = socket.gethostname()
    assert sorted(r.stdout.splitlines()) == [f"[0@{host}]:hi", f"[1@{host}]:hi"], r


def test_log_dir_layout_across_restarts(tmp_path):
    seen = tmp_path / "seen"
    logs = tmp_path / "logs"
    # Rank 1 always succeeds; rank 0 fails attempt 0 once rank 1 is done with it.
    script = (f'echo "$TORCHELASTIC_RESTART_COUNT $LOCAL_RANK $TORCHELASTIC_ERROR_FILE" >> {seen}; '
              'echo "attempt $TORCHELASTIC_RESTART_COUNT"; '
              f'done={tmp_path}/done_$TORCHELASTIC_RESTART_COUNT; '
              'if [ "$LOCAL_RANK" = 1 ]; then touch "$done"; exit 0; fi; '
              'while [ ! -f "$done" ]; do sleep 0.01; done; '
              '[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] || exit 3')
    r = run_ddprun(["--nproc_per_node=2", "--max_restarts=1", "--tee=1", f"--log_dir={logs}",
                    *sh(script)])
    assert r.rc == 0, r
    run = run_dir(logs)
    for attempt in (0, 1):
        for rank in (0, 1):
            out = run / f"attempt_{attempt}" / str(rank) / "stdout.log"
            assert out.read_text() == f"attempt {attempt}\n"
    got = sorted(seen.read_text().splitlines())
    assert got == sorted(f"{a} {l} {run}/attempt_{a}/{l}/error.json"
                         for a in (0, 1) for l in (0, 1))


RECORDED = """
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    raise RuntimeError("boom")

if __name__ == "__main__":
    main()
"""


def test_record_error_file_shows_in_report(tmp_path):
    script = write_script(tmp_path, "fails.py", RECORDED, executable=False)
    logs = tmp_path / "logs"
    r = run_ddprun([f"--log_dir={logs}", script], timeout=120)
    assert r.rc == 1, r
    error_file = run_dir(logs) / "attempt_0" / "0" / "error.json"
    data = json.loads(error_file.read_text())
    assert "RuntimeError: boom" in json.dumps(data)
    root = r.stderr.split("Root Cause (first observed failure):", 1)
    assert len(root) == 2, r
    assert f"error_file: {error_file}" in root[1], r
    assert "Traceback (most recent call last):" in root[1], r
    assert "RuntimeError: boom" in root[1], r
    assert "fails.py FAILED" in r.stderr, r


@pytest.mark.parametrize("kind", ["cut off", "empty"])
def test_an_error_file_cut_off_is_named_and_shown_not_taken_for_none(tmp_path, kind):
    """A worker killed while writing its error file (or writing bytes that are not UTF-8, or as
    it began, leaving it empty): the report named no file and advised @record."""
    logs = tmp_path / "logs"
    cut = r"""printf '{"message": {"message": "RuntimeError: boom\351' > "$TORCHELASTIC_ERROR_FILE"; exit 2"""
    if kind == "empty":
        cut = 'echo step 10; : > "$TORCHELASTIC_ERROR_FILE"; exit 2'
    r = run_ddprun([f"--log_dir={logs}", *sh(cut)])
    assert r.rc == 2, r
    error_file = run_dir(logs) / "attempt_0" / "0" / "error.json"
    assert f"error_file: {error_file}" in r.stderr, r
    if kind == "empty":
        assert ("the worker's error file is empty (0 bytes: the worker was killed while it wrote "
                "the file, or opened it and wrote nothing)" in r.stderr), r
    else:
        assert ("the worker's error file is not a record ddprun can read (not JSON: cut off, or "
                "not UTF-8, 44 bytes); it begins: {\"message\": {\"message\": "
                "\"RuntimeError: boom\\xe9" in r.stderr), r
    assert "wrote no error file" not in r.stderr, r
    incident = json.loads((run_dir(logs) / "incident.json").read_text())
    assert incident["root_cause"]["failure"]["error_file_contents"] is None, incident


def test_duplicate_stdout_filters(tmp_path):
    script = 'echo "info $LOCAL_RANK"; echo "ERROR bad $LOCAL_RANK"; echo ok; echo "x ERROR y"'
    r = run_ddprun(["--nproc_per_node=2", "--duplicate_stdout_filters=ERROR",
                    f"--log_dir={tmp_path}", *sh(script)])
    assert r.rc == 0, r
    filtered = (run_dir(tmp_path) / "attempt_0" / "filtered_stdout.log").read_text()
    assert filtered.endswith("\n")
    lines = filtered.splitlines()
    assert len(lines) == 4, filtered
    # Each line names its rank, also when the console shows the lines without a prefix.
    assert sorted(l for l in lines if "bad" in l) == ["[default0]:ERROR bad 0",
                                                      "[default1]:ERROR bad 1"], filtered
    assert sorted(l for l in lines if "bad" not in l) == ["[default0]:x ERROR y",
                                                          "[default1]:x ERROR y"], filtered
    # The console still shows everything.
    assert sorted(r.stdout.splitlines()).count("ok") == 2, r


def test_duplicate_filters_match_and_copy_whole_lines_longer_than_a_mebibyte(tmp_path):
    # Found by an attacking helper: ddprun reads a line over 1 MiB in pieces, and the filter
    # matched each piece: a text across two pieces was missed, and a match copied one piece.
    script = ("import sys; w = sys.stdout.write; w('A' * ((1 << 20) - 3) + 'NEEDLE tail\\n'); "
              "w('B' * (3 << 20) + ' NEEDLE\\n'); w('no match ' + 'C' * (2 << 20) + '\\n'); "
              "w('short NEEDLE line\\n')")
    r = run_ddprun(["--nproc_per_node=1", "--duplicate_stdout_filters=NEEDLE",
                    f"--log_dir={tmp_path}", "--redirects=1", "python3", "-c", script])
    assert r.rc == 0, r
    filtered = (run_dir(tmp_path) / "attempt_0" / "filtered_stdout.log").read_text()
    assert filtered.split("\n") == [
        "[default0]:" + "A" * ((1 << 20) - 3) + "NEEDLE tail",
        "[default0]:" + "B" * (3 << 20) + " NEEDLE", "[default0]:short NEEDLE line", ""], \
        [len(line) for line in filtered.split("\n")]


def test_log_dir_dev_null_gives_empty_error_file():
    r = run_ddprun(["--log_dir=/dev/null", *sh('echo "ef=[${TORCHELASTIC_ERROR_FILE-unset}]"')])
    assert r.rc == 0, r
    assert r.stdout.splitlines() == ["ef=[]"], r


def test_closed_console_does_not_stop_teed_workers(tmp_path):
    # ddprun's stdout is a pipe nobody reads; the teed worker must still finish its output.
    import subprocess
    from conftest import DDPRUN
    logs = tmp_path / "logs"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([str(DDPRUN), "--tee=3", f"--log_dir={logs}",
                               *sh("i=0; while [ $i -lt 500 ]; do echo line $i; i=$((i+1)); done")],
                              env=base_env(), stdout=write_end, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, timeout=30)
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    out = (run_dir(logs) / "attempt_0" / "0" / "stdout.log").read_text()
    assert out.splitlines() == [f"line {i}" for i in range(500)]


def test_root_cause_copied_to_ddprun_error_file(tmp_path):
    own = tmp_path / "agent_error.json"
    r = run_ddprun([f"--log_dir={tmp_path / 'logs'}", *sh("exit 3")],
                   env=base_env(TORCHELASTIC_ERROR_FILE=str(own)))
    assert r.rc == 3, r
    data = json.loads(own.read_text())
    assert data["message"]["errorCode"] == 3, data


def test_local_ranks_filter_without_tee_drops_other_ranks():
    r = run_ddprun(["--nproc_per_node=2", "--local_ranks_filter=0", *sh(BOTH_STREAMS)])
    assert r.rc == 0, r
    assert r.stdout.splitlines() == ["out 0"], r
    assert "err 0" in r.stderr.splitlines(), r
    assert "err 1" not in r.stderr, r


def test_per_rank_tee(tmp_path):
    r = run_ddprun(["--nproc_per_node=2", "-t", "0:3,1:0", f"--log_dir={tmp_path}",
                    *sh(BOTH_STREAMS)])
    assert r.rc == 0, r
    assert sorted(r.stdout.splitlines()) == ["[default0]:out 0", "out 1"], r
    attempt = run_dir(tmp_path) / "attempt_0"
    assert (attempt / "0" / "stdout.log").read_text() == "out 0\n"
    assert not (attempt / "1" / "stdout.log").exists()


@contextmanager
def small_tmpfs(where, options):
    """A tmpfs mounted at `where` with `options`, unmounted afterwards (root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 64 KiB tmpfs."""
    with small_tmpfs(tmp_path / "tiny", "size=64k") as tiny:
        yield tiny


def test_a_log_dir_out_of_inodes_is_named_with_the_cause_and_the_fix(tmp_path):
    """A filesystem with space but no free inode: ddprun said only "create ...: No space left
    on device", without the option, the cause or a fix (found by an attacking helper)."""
    with small_tmpfs(tmp_path / "few", "size=1m,nr_inodes=4") as few:
        (few / "logs").mkdir()
        i = 0
        while True:  # use up the inodes left
            try:
                (few / f"f{i}").touch()
            except OSError:
                break
            i += 1
        r = run_ddprun(["--nproc_per_node=1", "--log_dir", few / "logs", "/bin/true"])
    assert r.rc == 1, r
    assert re.search(r"--log_dir \S+/logs: create \S+: No space left on device: its filesystem "
                     r"has no free inode left, however much space \(df -i \S+\): remove files "
                     r"there, or point --log_dir at another filesystem", r.stderr), r


FILL = ("i=0; while [ $i -lt 5000 ]; do echo line $i of output to fill the disk; i=$((i+1)); "
        "done; echo done >&2")


def test_a_full_log_filesystem_is_named_as_the_cause(tiny_filesystem):
    """Output redirected (--redirects 3) to a 64 KiB tmpfs that fills up: the worker's writes
    fail with ENOSPC and nothing it says reaches anyone; the report names the full filesystem."""
    r = run_ddprun(["--nproc_per_node=1", "--redirects", "3", "--log_dir",
                    tiny_filesystem / "logs", "--no_python", "/bin/sh", "-c", FILL])
    assert r.rc == 1, r
    assert re.search(r"cause +: the filesystem of the job's log files is full.*has 0 B free",
                     r.stderr), r
    assert "--log_dir" in r.stderr


def test_a_full_log_filesystem_under_redirected_output_is_said_when_the_workers_succeed(
        tiny_filesystem):
    """The workers write their own log files (--redirects): a write that fails with ENOSPC is
    theirs alone, and a worker that goes on exits 0. ddprun said nothing while the output was
    cut short (found by an attacking helper); a full filesystem after the group is said."""
    r = run_ddprun(["--nproc_per_node=1", "--redirects", "3", "--log_dir",
                    tiny_filesystem / "logs", "--no_python", "/bin/sh", "-c", FILL + "; exit 0"])
    assert r.rc == 0, r
    assert re.search(r"the filesystem of the log files \(\S+\) is full \(0 B free for this user\): "
                     r"the workers wrote their own output there \(--redirects\)", r.stderr), r


def test_a_full_log_filesystem_is_not_blamed_for_a_worker_whose_logs_ddprun_wrote(
        tiny_filesystem):
    """With --tee ddprun writes the log files: the full disk failed ddprun's writes (reported as
    such), never the worker's, so a worker that exits 3 by itself gets no full-disk cause."""
    r = run_ddprun(["--nproc_per_node=1", "--tee", "3", "--log_dir", tiny_filesystem / "logs",
                    "--no_python", "/bin/sh", "-c", FILL + "; exit 3"])
    assert r.rc == 3, r
    assert "line 4999 of output" in r.stdout, r  # on the console all the same
    assert re.search(r"log file \S+stdout\.log is incomplete: write failed: No space left on "
                     r"device; its later output is only on the console", r.stderr), r
    assert "log lost  :" in r.stderr, r
    assert "cause     :" not in r.stderr, r


# A worker that leaves a sparse flight recorder at $DDPRUN_TRACE_FILE (a header, then holes),
# fills the filesystem under it, and fails: the layout of env/trace_file.hpp.
SPARSE_RECORDER = """
import os, struct
path = os.environ["DDPRUN_TRACE_FILE"]
with open(path, "wb") as f:
    f.write(b"DDPRTRC1" + struct.pack("<IiIIQ", 1, int(os.environ["RANK"]), 1024, 64, 0))
    f.write(bytes(32))
    f.truncate(64 + 1024 * 64)
try:
    with open(os.path.join(os.path.dirname(path), "filler"), "wb") as f:
        while True:
            f.write(bytes(4096))
            f.flush()
except OSError:
    pass
raise SystemExit(3)
"""


def test_a_sparse_flight_recorder_on_a_full_filesystem_does_not_kill_ddprun(tiny_filesystem,
                                                                             tmp_path):
    """ddprun mapped each failed rank's flight recorder to read it; a hole of a sparse file on a
    full tmpfs raised SIGBUS in ddprun itself: no report, exit 135 (found by an attacking
    helper). It reads with pread now."""
    script = write_script(tmp_path, "sparse.py", SPARSE_RECORDER, executable=False)
    r = run_ddprun(["--nproc_per_node=1", "--log_dir", tiny_filesystem / "logs", script])
    assert r.rc == 3, r
    assert "Root Cause (first observed failure):" in r.stderr, r


def test_the_ddp_core_trains_on_without_its_flight_recorder_when_the_disk_is_full(
        tiny_filesystem):
    """The DDP core's recorder (64 KiB) is allocated at once: on a filesystem without room it
    is refused with a message, and training goes on; mapped sparse, its first write past the
    free space killed the worker with SIGBUS."""
    r = run_ddprun(["--nproc_per_node=2", "--log_dir", tiny_filesystem / "logs", TRAIN,
                    "--device", "cpu", "--width", "32", "--depth", "1", "--steps", "5"])
    assert r.rc in (0, 74), r  # 74: a log file it could not write whole
    assert re.search(r"ddp: rank \d: no flight recorder: allocate 65600 bytes for flight "
                     r"recorder \S+trace\.bin: No space left on device: training goes on", r.stderr), r
    assert len(checksums(r.stdout)) == 2, r


# Rank 0 draws a progress bar on stderr and waits, its line unfinished, until the test has
# seen the bar; then rank 1 writes a whole line, and rank 0 redraws and ends its line.
PROGRESS = """
import os, sys, time
from pathlib import Path
rank, d = os.environ["LOCAL_RANK"], Path(sys.argv[1])
def wait(name):
    while not (d / name).exists():
        time.sleep(0.02)
if rank == "0":
    sys.stderr.write("\\r 10%|#   |")
    wait("seen")
    (d / "bar").touch()
    wait("other")
    sys.stderr.write("\\r100%|####|")
    sys.stderr.write("\\n")
else:
    wait("bar")
    sys.stderr.write("rank 1 says hello\\n")
    (d / "other").touch()
"""


@contextmanager
def reading(args, stdout, stderr):
    """ddprun ARGS in a session of its own, its output read by the test; killed if still
    running when the block ends."""
    proc = subprocess.Popen(args, env=base_env(), stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=stderr, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def read_until(stream, needle, got, timeout=20):
    """Reads the pipe `stream` (by its descriptor: a later read() of the file object then
    misses nothing) onto `got` until `needle` is in it; returns it."""
    deadline = time.monotonic() + timeout
    while needle not in got and time.monotonic() < deadline:
        if select.select([stream], [], [], 0.1)[0]:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            got += chunk
    assert needle in got, got
    return got


@pytest.mark.parametrize("tee", [False, True])
def test_unfinished_line_is_shown_before_its_end(tmp_path, tee):
    """A progress bar (no newline, redrawn with '\\r') shows while the line is unfinished, as on
    the worker's own terminal; another rank's line then starts on a line of its own and the
    bar's own end adds no empty line. With --tee the prefix comes again after each '\\r' (and
    before one that starts a line)."""
    script = write_script(tmp_path, "progress.py", PROGRESS, executable=False)
    args = [str(DDPRUN), "--nproc_per_node=2", str(script), str(tmp_path)]
    if tee:
        args[1:1] = ["--tee=3", f"--log_dir={tmp_path / 'logs'}"]
    with reading(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        got = read_until(proc.stderr, b"10%|#   |", b"")
        assert proc.poll() is None  # shown while the worker still runs, its line unfinished
        (tmp_path / "seen").touch()
        got += proc.stderr.read()
        assert proc.wait(timeout=20) == 0, got
    text = got.decode()
    p0, p1 = ("[default0]:", "[default1]:") if tee else ("", "")
    bar = f"{p0}\r{p0} 10%|#   |\n{p1}rank 1 says hello\n{p0}\r{p0}100%|####|\n"
    assert bar in text, repr(text)


def test_a_line_of_ddprun_on_stderr_ends_a_bar_on_stdout_whose_rest_keeps_its_prefix(tmp_path):
    """stdout and stderr into one pipe (as one terminal): ddprun's message on stderr ended the
    bar on stdout's line ("[default0]: 10%[ddprun ... info] ..."), and the bar's rest came
    without its prefix. Now the message starts a line and the rest starts one with its prefix."""
    seen = tmp_path / "seen"
    pid1 = tmp_path / "pid1"
    script = (f'if [ "$RANK" = 0 ]; then printf "\\r 10%%"; while [ ! -e {seen} ]; do sleep 0.05; '
              f'done; printf "\\r 20%%\\n"; else echo $$ > {pid1}.tmp; mv {pid1}.tmp {pid1}; '
              f'while [ ! -e {seen} ]; do sleep 0.05; done; fi')
    args = [str(DDPRUN), "--nproc_per_node=2", "--tee=3", "--hang_timeout=60",
            f"--log_dir={tmp_path / 'logs'}", *sh(script)]
    with reading(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        got = read_until(proc.stdout, b"[default0]: 10%", b"")
        wait_for(pid1.exists, timeout=20, what="rank 1's pid file")
        worker = int(pid1.read_text())
        os.kill(worker, signal.SIGSTOP)  # ddprun says so on stderr, the bar still open
        got = read_until(proc.stdout, b"is stopped by a signal (SIGSTOP)", got)
        os.kill(worker, signal.SIGCONT)
        seen.touch()
        got += proc.stdout.read()
        assert proc.wait(timeout=20) == 0, got
    text = got.decode()
    assert re.search(r"\r\[default0\]: 10%\n\[ddprun [0-9:]+ info\] rank 1 \(local_rank 1, "
                     r"pid \d+\) is stopped", text), repr(text)
    assert "\r[default0]: 20%\n" in text, repr(text)
    assert "20%\n\n" not in text, repr(text)


def test_every_teed_console_line_begins_with_its_prefix(tmp_path):
    """A "\\r\\n" line (tools that write CRLF) went out bare, and one starting with a carriage
    return had its prefix after it: such lines could not be told to a rank in a file or under
    grep (attack 86)."""
    # Bytes: text mode would turn each carriage return into a newline.
    r = subprocess.run([str(DDPRUN), "--nproc_per_node=2", "--tee=3",
                        *sh(r'printf "first\n\r\n\rredrawn\nlast\n"')], cwd=tmp_path,
                       env=base_env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert r.returncode == 0, r
    out = r.stdout.decode()
    lines = out.split("\n")[:-1]
    assert len(lines) == 8, repr(out)
    assert all(re.match(r"\[default[01]\]:", line) for line in lines), repr(out)
    assert out.count("[default0]:\r[default0]:redrawn\n") == 1, repr(out)


def test_a_missing_tmpdir_falls_back_to_tmp_as_pythons_tempfile_and_says_so(tmp_path):
    """A stale TMPDIR stopped the launch (attack 115): torchrun, through Python's tempfile,
    falls back to /tmp. The workers still get TMPDIR as it is."""
    missing = tmp_path / "missing"
    script = 'echo "tmpdir=$TMPDIR"; echo "err=$TORCHELASTIC_ERROR_FILE"'
    r = run_ddprun(["--nproc_per_node=1", *sh(script)], env=base_env(TMPDIR=str(missing)))
    assert r.rc == 0, r
    assert (f"TMPDIR={missing} is no writable directory (No such file or directory): ddprun's "
            "temporary files (the logs without --log_dir, heartbeat and timer files) go under "
            "/tmp, as Python's tempfile falls back") in r.stderr, r.stderr
    assert f"tmpdir={missing}\n" in r.stdout, r
    assert re.search(r"^err=/tmp/ddprun_\w+/", r.stdout, re.M), r


def test_a_progress_bar_left_unfinished_by_a_failed_worker_is_ended_before_the_report(tmp_path):
    """The dead worker's unfinished bar is shown and ended, and the report's border starts its
    own line. (The line end comes from the stream's close, as it did before; that ddprun's own
    lines break a still-open worker line is console_test's "the launcher's message starts on a
    line of its own"; here every ddprun line after the bar comes once the stream closed.)"""
    script = write_script(tmp_path, "bar_then_fail.py", (
        "import sys, time\nsys.stderr.write('\\r 50%|##  |')\nsys.stderr.flush()\n"
        "time.sleep(0.5)\nsys.exit(3)\n"), executable=False)
    r = run_ddprun(["--nproc_per_node=1", script])
    assert r.rc == 3, r
    # (text mode reads the '\r' as a line end)
    assert "\n 50%|##  |\n[ddprun " in r.stderr, repr(r.stderr)
    border = next(line for line in r.stderr.split("\n") if "=====" in line)
    assert border == "=" * len(border), repr(r.stderr)


ALTERNATE = ("import sys\n"
             "for i in range(500):\n"
             "    print('out', i, flush=True)\n"
             "    print('err', i, file=sys.stderr, flush=True)\n"
             "raise SystemExit(\"ModuleNotFoundError: No module named 'zzz'\")\n")


def test_stdout_and_stderr_on_one_file_keep_the_workers_order(tmp_path):
    """`ddprun ... > log 2>&1` (and a Slurm output file): stderr is read for the failure report,
    stdout would go straight on, and a line of stderr fell behind the stdout written after it.
    One pipe for both keeps the worker's order; the report still has its last lines."""
    log = tmp_path / "out.log"
    with open(log, "w") as f:
        r = subprocess.run([str(DDPRUN), "--nproc_per_node=1", "python3", "-c", ALTERNATE],
                           env=base_env(), stdin=subprocess.DEVNULL, stdout=f,
                           stderr=subprocess.STDOUT, timeout=60)
    assert r.returncode == 1
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith(("out ", "err "))]
    expected = [f"{s} {i}" for i in range(500) for s in ("out", "err")]
    assert lines == expected, lines[:20]
    assert re.search(r"cause +: the workers' Python cannot import zzz", log.read_text())


@pytest.mark.parametrize("tee", [False, True])
def test_a_line_longer_than_a_mebibyte_stays_one_line(tee):
    """ddprun reads stderr (for the failure report) a line at a time, and a line over its 1 MiB
    bound comes in pieces: the console still gets the one 3 MB line, prefixed once."""
    r = run_ddprun(["--nproc_per_node=1", *(["-t", "3"] if tee else []), "python3", "-c",
                    "import sys; sys.stderr.write('y' * 3_000_000 + '\\n')"])
    assert r.rc == 0, r.rc
    long_lines = [ln for ln in r.stderr.splitlines() if "yyyy" in ln]
    assert long_lines == [("[default0]:" if tee else "") + "y" * 3_000_000], \
        [len(ln) for ln in long_lines]



def test_a_relative_tmpdir_gives_the_workers_absolute_paths(tmp_path):
    # Attack 78: TMPDIR=tmp gave TORCHELASTIC_ERROR_FILE and the heartbeat file as relative
    # paths; a worker that changed directory could not write its error file, and the report
    # said "no traceback". Python's tempfile (torchrun's) makes a relative TMPDIR absolute.
    (tmp_path / "tmp").mkdir()
    (tmp_path / "elsewhere").mkdir()
    script = ("import os, sys, json\n"
              "print('ERROR_FILE=' + os.environ['TORCHELASTIC_ERROR_FILE'], flush=True)\n"
              "os.chdir('elsewhere')\n"
              "with open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w') as f:\n"
              "    json.dump({'message': {'message': 'ValueError: raised after a chdir',\n"
              "               'extraInfo': {'py_callstack': 'ValueError: raised after a chdir',\n"
              "                             'timestamp': '1'}}}, f)\n"
              "sys.exit(3)\n")
    r = run_ddprun(["--nproc_per_node=1", "--no_python", "python3", "-c", script],
                   env=base_env(TMPDIR="tmp"), cwd=tmp_path)
    assert r.rc == 3, r
    path = re.search(r"ERROR_FILE=(\S+)", r.stdout).group(1)
    assert path.startswith(str(tmp_path / "tmp") + "/ddprun_"), path
    assert "ValueError: raised after a chdir" in r.stderr, r.stderr


@pytest.mark.parametrize("make,said", [
    (lambda d: (d / "logs").symlink_to(d / "missing"), "is a symbolic link to {d}/missing, "
                                                       "which does not exist"),
    (lambda d: None, "is not a directory")], ids=["dangling-link", "device"])
def test_a_log_dir_that_cannot_be_a_directory_says_why(tmp_path, make, said):
    # Attack 78: both were "File exists".
    make(tmp_path)
    log_dir = "logs" if "link" in said else "/dev/null/"
    r = run_ddprun(["--nproc_per_node=1", f"--log_dir={log_dir}", "--no_python", "true"],
                   cwd=tmp_path)
    assert r.rc == 1, r
    assert f"--log_dir {log_dir} " + said.format(d=tmp_path) in r.stderr, r.stderr
    assert "File exists" not in r.stderr, r.stderr
