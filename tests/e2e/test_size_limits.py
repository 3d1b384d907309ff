"""Size limits a job meets partway: the file size limit (ulimit -f) and the caps on address
space (ulimit -v) and data (ulimit -d).

ddprun raises their soft values to the hard ones before it spawns, warns about finite hard
values, survives its own log files reaching the file size limit without losing a line of
the workers' output, and explains a worker that failed on one of them.
"""
import json
import re
import resource
import subprocess
import time

from conftest import DDPRUN, PYTHON, base_env

LINES = 2000  # 2000 lines of 61 bytes: about 120 KiB per rank, past a 64 KiB limit
PRINTER = f"for i in range({LINES}): print('%05d' % i + 'x' * 55)\nprint('END')"


def run_limited(limits, args, timeout=60):
    """Runs ddprun ARGS with resource limits {RLIMIT_X: (soft, hard)} set in the child only."""
    def set_limits():
        for resource_id, soft_hard in limits.items():
            resource.setrlimit(resource_id, soft_hard)
    return subprocess.run([str(DDPRUN), *map(str, args)], env=base_env(), preexec_fn=set_limits,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=timeout)


def shown_lines(stdout, rank):
    return [line for line in stdout.splitlines() if line.startswith(f"[default{rank}]:")]


def test_log_files_past_the_file_size_limit_lose_no_output_on_the_console(tmp_path):
    r = run_limited({resource.RLIMIT_FSIZE: (64 << 10, 64 << 10)},
                    ["--nproc_per_node=2", "--tee=3", "--log_dir", tmp_path, "python3", "-c",
                     PRINTER])
    # ddprun lived (no SIGXFSZ death: 153), showed every line and says the logs are short.
    assert r.returncode == 74, (r.returncode, r.stderr)
    for rank in (0, 1):
        assert len(shown_lines(r.stdout, rank)) == LINES + 1, r.stdout[-2000:]
        assert f"[default{rank}]:END" in r.stdout
        log = next(tmp_path.glob(f"*/attempt_0/{rank}/stdout.log"))
        assert log.stat().st_size == 64 << 10
    assert re.search(r"log file \S+/stdout\.log is incomplete: write failed: File too large "
                     r"\(the file size limit, ulimit -f\); its later output is only on the "
                     r"console", r.stderr), r.stderr
    assert "the workers succeeded but 2 log file(s) are incomplete" in r.stderr, r.stderr
    # The incident report's message is that line (attack 102: it was "").
    incident = json.loads(next(tmp_path.glob("*/incident.json")).read_text())
    assert incident["message"].startswith("the workers succeeded but 2 log file(s) are "
                                          "incomplete"), incident
    assert re.search(r"warning\] RLIMIT_FSIZE \(ulimit -f\): soft 64\.0 KiB, hard 64\.0 KiB: no "
                     r"worker can write a file larger than the hard limit", r.stderr), r.stderr


def test_the_filtered_file_every_rank_writes_is_named_and_counted_once_when_it_fails(tmp_path):
    # Found by an attacking helper: filtered_stdout.log, shared by the ranks, was said to be
    # incomplete once per rank and counted so ("4 log file(s)" of 3).
    r = run_limited({resource.RLIMIT_FSIZE: (64 << 10, 64 << 10)},
                    ["--nproc_per_node=2", "--redirects=3", "--duplicate_stdout_filters=x",
                     "--log_dir", tmp_path, "python3", "-c", PRINTER])
    assert r.returncode == 74, (r.returncode, r.stderr)
    assert r.stderr.count("filtered_stdout.log is incomplete") == 1, r.stderr
    assert "the workers succeeded but 3 log file(s) are incomplete" in r.stderr, r.stderr


def test_a_stream_only_its_log_file_kept_goes_to_the_console_once_the_file_fails(tmp_path):
    # --redirects without --tee: the log file alone keeps the output, read through ddprun
    # (--hang_detect=output); once the file refuses, the rest is shown, prefixed by rank.
    r = run_limited({resource.RLIMIT_FSIZE: (64 << 10, 64 << 10)},
                    ["--nproc_per_node=2", "--redirects=3", "--hang_detect=output", "--log_dir",
                     tmp_path, "python3", "-c", PRINTER])
    assert r.returncode == 74, (r.returncode, r.stderr)
    for rank in (0, 1):
        shown = shown_lines(r.stdout, rank)
        assert shown and shown[-1] == f"[default{rank}]:END", r.stdout[-2000:]
        log = next(tmp_path.glob(f"*/attempt_0/{rank}/stdout.log")).read_text()
        # Nothing lost, nothing twice: the console starts at the line the file has in part
        # (it repeated the lines of the chunk whose write failed: attack 90).
        first_shown = int(shown[0][len(f"[default{rank}]:"):][:5])
        assert first_shown == log.count("\n"), (first_shown, log.count("\n"))
    assert "its later output is shown on the console instead" in r.stderr, r.stderr


def test_once_its_log_file_failed_a_stream_is_held_back_by_a_stalled_console_not_dropped(tmp_path):
    # The file gone, its lines are kept nowhere else: they were dropped while the console did
    # not read, and the notice sent the user to that file (attack 90).
    lines = 60000
    printer = f"import sys\nfor i in range({lines}): sys.stdout.write('%06d' % i + 'y' * 94 + '\\n')"

    def set_limits():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 << 10, 100 << 10))
    p = subprocess.Popen([str(DDPRUN), "--nproc_per_node=1", "--tee=1", "--log_dir",
                          str(tmp_path), "python3", "-c", printer], env=base_env(),
                         preexec_fn=set_limits, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4)  # the console reads nothing meanwhile
    out, err = p.communicate(timeout=120)
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    assert p.returncode == 74, err
    assert "not shown" not in out + err, err
    log = next(tmp_path.glob("*/attempt_0/0/stdout.log")).read_text(errors="replace")
    seen = {line[:6] for line in log.splitlines() if len(line) == 100}
    seen |= {line[-100:][:6] for line in out.splitlines() if line.endswith("y" * 94)}
    assert len(seen) == lines, (lines - len(seen), err[-2000:])


def test_soft_size_limits_are_raised_to_the_hard_ones_for_the_workers():
    unlimited = resource.RLIM_INFINITY
    r = run_limited({resource.RLIMIT_FSIZE: (64 << 10, unlimited),
                     resource.RLIMIT_AS: (4 << 30, unlimited),
                     resource.RLIMIT_DATA: (4 << 30, unlimited)},
                    ["--nproc_per_node=1", "python3", "-c",
                     "import resource as r; print([r.getrlimit(x)[0] for x in "
                     "(r.RLIMIT_FSIZE, r.RLIMIT_AS, r.RLIMIT_DATA)])"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[-1, -1, -1]", r.stdout
    assert "raised RLIMIT_FSIZE (ulimit -f) soft limit from 64.0 KiB to unlimited (hard)" \
        in r.stderr, r.stderr
    assert "raised RLIMIT_AS (ulimit -v) soft limit from 4.0 GiB to unlimited (hard)" \
        in r.stderr, r.stderr
    assert "raised RLIMIT_DATA (ulimit -d) soft limit from 4.0 GiB to unlimited (hard)" \
        in r.stderr, r.stderr


def test_a_worker_killed_by_sigxfsz_is_explained_with_the_limit(tmp_path):
    # Python ignores SIGXFSZ; a C or C++ worker does not: the worker puts the default back.
    big = tmp_path / "checkpoint.bin"
    r = run_limited({resource.RLIMIT_FSIZE: (64 << 10, 64 << 10)},
                    ["--nproc_per_node=1", "python3", "-c",
                     "import signal; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
                     f"open({str(big)!r}, 'wb').write(bytes(1 << 20))"])
    assert r.returncode == 128 + 25, r.stderr
    assert ("cause     : the worker died of SIGXFSZ: a write of it went past the file size limit "
            "(RLIMIT_FSIZE, ulimit -f: soft 64.0 KiB, hard 64.0 KiB)") in r.stderr, r.stderr
    assert "fix       : as root raise the hard limit: ulimit -Hf unlimited" in r.stderr, r.stderr


def test_workers_get_sigxfsz_back_although_ddprun_ignores_it(tmp_path):
    # head, a C program under sh, dies of SIGXFSZ (sh exits 128 + 25) as it would without
    # ddprun; inheriting ddprun's SIG_IGN, it would see EFBIG and exit 1.
    r = run_limited({resource.RLIMIT_FSIZE: (64 << 10, 64 << 10)},
                    ["--nproc_per_node=1", "--no_python", "/bin/sh", "-c",
                     f"head -c 1000000 /dev/zero > {tmp_path / 'out.bin'}"])
    assert r.returncode == 128 + 25, r.stderr
    assert re.search(r"exit code 153\b", r.stderr), r.stderr


def test_a_checkpoint_cut_short_by_the_file_size_limit_is_explained(tmp_path):
    # PyTorch's zip writer reports the short write only as "unexpected pos N vs M".
    r = run_limited({resource.RLIMIT_FSIZE: (64 << 10, 64 << 10)},
                    ["--nproc_per_node=1", PYTHON, "-c",
                     "import torch; torch.save({'w': torch.zeros(1 << 20)}, "
                     f"{str(tmp_path / 'ckpt.pt')!r})"], timeout=120)
    assert r.returncode == 1, r.stderr
    assert "unexpected pos" in r.stderr or "failed writing file" in r.stderr, r.stderr
    assert ("cause     : torch.save wrote less than the whole file (PyTorch's zip writer says so "
            "as \"unexpected pos\" or \"failed writing file\", without the system's reason): the "
            "file size limit (RLIMIT_FSIZE, ulimit -f: soft 64.0 KiB, hard 64.0 KiB) or a full "
            "filesystem") in r.stderr, r.stderr


def test_memory_refused_under_an_address_space_cap_is_explained_with_the_cap():
    cap = 1 << 30
    r = run_limited({resource.RLIMIT_AS: (cap, cap)},
                    ["--nproc_per_node=1", "python3", "-c", "b = bytearray(2 << 30)"])
    assert r.returncode == 1, r.stderr
    assert "MemoryError" in r.stderr, r.stderr
    assert ("cause     : a worker could not get memory (MemoryError) under a cap on its address "
            "space: RLIMIT_AS (ulimit -v), soft 1.0 GiB, hard 1.0 GiB") in r.stderr, r.stderr
    assert "ulimit -Hv unlimited" in r.stderr, r.stderr


def test_doctor_warns_about_a_finite_hard_file_size_limit():
    r = run_limited({resource.RLIMIT_FSIZE: (1 << 30, 1 << 30)}, ["doctor"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^  warn\s+RLIMIT_FSIZE \(ulimit -f\)\s+soft 1\.0 GiB, hard 1\.0 GiB: no "
                     r"worker can write a file larger than the hard limit", r.stdout, re.M), \
        r.stdout
    assert re.search(r"^  (ok|warn)\s+RLIMIT_AS \(ulimit -v\)\s+soft ", r.stdout, re.M), r.stdout
    assert re.search(r"^  (ok|warn)\s+RLIMIT_DATA \(ulimit -d\)\s+soft ", r.stdout, re.M), r.stdout
