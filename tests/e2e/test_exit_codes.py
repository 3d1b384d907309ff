"""Exit codes, usage errors and how the program is started, as a user sees them."""

import os
import re
import signal
import subprocess
import time

import pytest

from conftest import (DDPRUN, FD_PROBE, PYTHON, base_env, run_ddprun, sh, write_script)

# Rank 1 exits with $CODE; rank 0 sleeps until ddprun stops it (sleep dies on SIGTERM).
RANK1_EXITS = 'if [ "$LOCAL_RANK" = 1 ]; then exit {code}; fi; exec sleep 30'
# Rank 1 kills itself with signal N; rank 0 sleeps.
RANK1_KILLED = ('if [ "$LOCAL_RANK" = 1 ]; then echo "giving up: checkpoint 7 is corrupt" >&2; '
                'kill -{sig} $$; fi; exec sleep 30')


def test_all_workers_succeed_exits_0():
    r = run_ddprun(["--nproc_per_node=3", *sh('echo "ok $RANK"')])
    assert r.rc == 0, r
    assert sorted(r.stdout.split("\n")[:-1]) == ["ok 0", "ok 1", "ok 2"], r


@pytest.mark.parametrize("code", [1, 2, 3, 42, 100, 126, 127, 200, 255])
def test_worker_exit_code_is_ddprun_exit_code(code, tmp_path):
    r = run_ddprun(["--nproc_per_node=2", *sh(RANK1_EXITS.format(code=code))], cwd=tmp_path)
    assert r.rc == code, r
    # Rank 0 was stopped by SIGTERM, not left to run out its sleep or the 30 s grace.
    assert r.elapsed < 5, r
    assert "Root Cause (first observed failure):" in r.stderr, r
    assert re.search(rf"exitcode\s*: {code} ", r.stderr), r
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)", r.stderr), r


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL, signal.SIGABRT])
def test_worker_killed_by_signal_exits_128_plus_n(sig, tmp_path):
    r = run_ddprun(["--nproc_per_node=2", *sh(RANK1_KILLED.format(sig=int(sig)))], cwd=tmp_path)
    assert r.rc == 128 + sig, r
    assert r.elapsed < 5, r
    root = r.stderr.split("Root Cause (first observed failure):", 1)
    assert len(root) == 2, r
    assert f"exitcode  : -{int(sig)} " in root[1], r
    assert sig.name in root[1], r
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)", root[1]), r
    # What it said last is kept, as for an exit code (it was dropped: attack 83).
    assert re.search(rf"Signal {int(sig)} \({sig.name}\) received by PID \d+\n\s*its last stderr "
                     r"line: giving up: checkpoint 7 is corrupt\n", root[1]), r


@pytest.mark.parametrize("keep", [[], ["--tee", "2"]])
def test_a_failed_rank_left_out_by_the_filter_says_why_its_report_is_bare(tmp_path, keep):
    """--local_ranks_filter=0: local rank 1's stderr goes nowhere (as under torchrun), and its
    report said only "the worker wrote no error file" (attack 83). It says why now; with its
    stderr in a log file its last line is there."""
    r = run_ddprun(["--nproc_per_node=2", "--local_ranks_filter=0", *keep,
                    *sh('if [ "$LOCAL_RANK" = 1 ]; then echo "checkpoint 7 is corrupt" >&2; '
                        'exit 3; fi; exec sleep 30')], cwd=tmp_path)
    assert r.rc == 3, r
    root = r.stderr.split("Root Cause (first observed failure):", 1)[1]
    hidden = "its output was not kept: --local_ranks_filter leaves out local rank 1"
    assert (hidden in root) == (not keep), r
    assert ("its last stderr line: checkpoint 7 is corrupt" in root) == bool(keep), r


def test_a_worker_sharing_one_pipe_for_both_streams_has_its_last_output_line_named_so(tmp_path):
    """ddprun's stdout and stderr one file (> log 2>&1, a Slurm output file): the worker gets one
    pipe for both, and its last stdout line was reported as "its last stderr line" (attack 85)."""
    log = tmp_path / "both.log"
    with open(log, "wb") as both:
        rc = subprocess.run([str(DDPRUN), *sh('echo "this is stdout"; exit 3')], env=base_env(),
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=both, stderr=both,
                            timeout=60).returncode
    text = log.read_text()
    assert rc == 3, text
    assert "its last output line: this is stdout" in text, text
    assert "last stderr line" not in text, text


@pytest.mark.parametrize("how", ["kill -PIPE $$",
                                 "echo 'ConnectionResetError: Connection reset by peer' >&2; "
                                 "exit 2"])
def test_a_peer_like_failure_on_a_single_node_ends_the_job_at_once(how, tmp_path):
    """SIGPIPE (a worker's stdout piped to `head`) or a dropped connection reads as a failure
    caused by a peer, which a multi-node job waits for (its cause may be another node's); in a
    round of this node's workers alone there is no other node to wait for (it waited 20 s)."""
    r = run_ddprun(["--nproc_per_node=2", *sh(f'if [ "$LOCAL_RANK" = 1 ]; then {how}; fi; '
                                               'exec sleep 30')], cwd=tmp_path)
    assert r.rc == (128 + signal.SIGPIPE if "PIPE" in how else 2), r
    assert r.elapsed < 10, r
    assert "(worker failure)" in r.stderr, r


def test_nonexistent_program_exits_127(tmp_path):
    missing = tmp_path / "no-such-program"
    r = run_ddprun(["--no_python", missing])
    assert r.rc == 127, r
    assert str(missing) in r.stderr, r


def test_program_not_on_path_exits_127():
    r = run_ddprun(["ddprun-no-such-program-xyz"])
    assert r.rc == 127, r
    assert "ddprun-no-such-program-xyz" in r.stderr, r


@pytest.mark.parametrize("here", ["directory", "executable"])
def test_no_python_looks_a_bare_name_up_on_path_only_as_torchrun(tmp_path, here):
    """`--no_python bash` in a directory holding a bash/ folder was refused (126), and a file
    ./bash there ran instead of /usr/bin/bash (attack 115): torchrun's execvp searches PATH."""
    if here == "directory":
        (tmp_path / "sh").mkdir()
    else:
        write_script(tmp_path, "sh", "#!/bin/sh\necho the-local-one\n")
    r = run_ddprun(["--no_python", "sh", "-c", "echo ran-$$RANK"], cwd=tmp_path)
    assert r.rc == 0 and "ran-0" in r.stdout and "the-local-one" not in r.stdout, r


def test_no_python_with_a_name_only_here_says_how_to_run_it(tmp_path):
    write_script(tmp_path, "ddprun-only-here-xyz", "#!/bin/sh\necho hi\n")
    r = run_ddprun(["--no_python", "ddprun-only-here-xyz"], cwd=tmp_path)
    assert r.rc == 127 and "hi" not in r.stdout, r
    assert "./ddprun-only-here-xyz runs the one in this directory" in r.stderr, r
    # Without --no_python, as torchrun gives the name to Python: the file here.
    r = run_ddprun(["ddprun-only-here-xyz"], cwd=tmp_path)
    assert r.rc == 0 and "hi" in r.stdout, r


def test_directory_as_program_exits_126(tmp_path):
    r = run_ddprun(["--no_python", tmp_path])
    assert r.rc == 126, r
    assert str(tmp_path) in r.stderr, r


@pytest.mark.parametrize("kind", ["directory", "zip", "directory, --run_path"])
def test_a_directory_or_zip_with_a_main_runs_under_python_as_under_torchrun(tmp_path, kind):
    """`python app` runs app/__main__.py (and a zip archive's), so torchrun runs them: ddprun
    refused a directory ("is a directory", 126; found by an attacking helper)."""
    import zipfile
    # One write each: print() under python -u writes its pieces apart (the ranks share stdout).
    main = ('import os, sys\n'
            'os.write(1, f"app ran {os.environ[\'RANK\']} {sys.argv[1:]}\\n".encode())\n')
    if kind.startswith("directory"):
        app = tmp_path / "app"
        app.mkdir()
        (app / "__main__.py").write_text(main)
    else:
        app = tmp_path / "app.zip"
        with zipfile.ZipFile(app, "w") as z:
            z.writestr("__main__.py", main)
    flags = ["--run_path"] if "run_path" in kind else []
    r = run_ddprun(["--nproc_per_node=2", *flags, app.name, "--x"], cwd=tmp_path)
    assert r.rc == 0, r
    assert sorted(line for line in r.stdout.splitlines() if "app ran" in line) == \
        ["app ran 0 ['--x']", "app ran 1 ['--x']"], r


def test_a_directory_without_a_main_is_refused_saying_what_python_needs(tmp_path):
    (tmp_path / "app").mkdir()
    r = run_ddprun(["app"], cwd=tmp_path)
    assert r.rc == 126, r
    assert "app: is a directory without a __main__.py, which Python would run" in r.stderr, r


@pytest.mark.parametrize("kind", ["truncated_elf", "symlink_loop"])
def test_a_program_found_but_not_runnable_exits_126_as_in_a_shell(tmp_path, kind):
    """A truncated binary (exec: Exec format error) or a symlink loop: found, not runnable, 126
    as a shell says; they exited 1 (found by an attacking helper)."""
    prog = tmp_path / "prog"
    if kind == "truncated_elf":
        prog.write_bytes(open("/bin/true", "rb").read(100))
        prog.chmod(0o755)
    else:
        os.symlink(tmp_path / "other", prog)
        os.symlink(prog, tmp_path / "other")
    r = run_ddprun(["--no_python", prog])
    assert r.rc == 126, r
    assert str(prog) in r.stderr, r


@pytest.mark.parametrize("path, kind", [("fifo", "a named pipe (FIFO)"),
                                        ("/dev/null", "a character device")])
def test_a_program_that_is_no_file_is_named_for_what_it_is(tmp_path, path, kind):
    """A FIFO or a device as the program was "not executable (chmod +x it ...)", advice that
    cannot help (attack 87)."""
    if path == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    r = run_ddprun(["--no_python", path])
    assert r.rc == 126, r
    assert f"{path}: is {kind}, not a program file" in r.stderr, r


def test_non_executable_file_with_no_python_exits_126(tmp_path):
    prog = write_script(tmp_path, "prog", "#!/bin/sh\necho hi\n", executable=False)
    r = run_ddprun(["--no_python", prog])
    assert r.rc == 126, r
    assert str(prog) in r.stderr, r
    assert "hi" not in r.stdout


@pytest.mark.parametrize("kind", ["crlf", "interpreter", "loader", "no #! line"])
def test_a_program_whose_exec_would_say_no_such_file_exits_126_saying_why(tmp_path, kind):
    """A file that exists but cannot start: execve says "No such file or directory" (a #! line
    with Windows line endings, an interpreter or ELF dynamic loader that does not exist)."""
    if kind == "crlf":
        prog = write_script(tmp_path, "prog", "#!/bin/sh\r\necho hi\r\n")
        expected = ("has Windows line endings (CRLF): its #! line names the interpreter "
                    "'/bin/sh\\r', which does not exist; convert the file (dos2unix")
    elif kind == "no #! line":  # execve says "Exec format error" for this one
        prog = write_script(tmp_path, "prog", "echo hi\n")
        expected = ("a text file without a #! line, which the kernel cannot run (Exec format "
                    "error; a shell would run it with /bin/sh): add a first line")
    elif kind == "interpreter":
        prog = write_script(tmp_path, "prog", "#!/no/such/python3 -u\nprint('hi')\n")
        expected = "its #! line names the interpreter /no/such/python3, which does not exist"
    else:
        binary = open("/bin/true", "rb").read()
        loader = next(seg for seg in (b"/lib64/ld-linux-x86-64.so.2", b"/lib/ld-linux-aarch64.so.1")
                      if seg in binary)
        prog = tmp_path / "prog"
        prog.write_bytes(binary.replace(loader, loader.replace(b"ld-", b"nx-")))
        prog.chmod(0o755)
        expected = f"its dynamic loader {loader.replace(b'ld-', b'nx-').decode()} does not exist"
    # Without --no_python, a text file without a #! line runs under Python (below).
    flags = ["--no_python"] if kind == "no #! line" else []
    r = run_ddprun(["--nproc_per_node=2", *flags, prog])
    assert r.rc == 126, r
    assert f"ddprun: cannot run {prog}: {prog}: {expected}" in r.stderr, r
    assert "hi" not in r.stdout and "rendezvous" not in r.stderr, r  # before any worker


def test_an_executable_python_file_without_a_shebang_runs_under_python_as_under_torchrun(
        tmp_path):
    """torchrun runs `python -u trainer` for any program; ddprun refused an executable text file
    without a #! line, advising /bin/sh (found by an attacking helper)."""
    write_script(tmp_path, "trainer",
                 'import os\nos.write(1, ("trained " + os.environ["RANK"] + "\\n").encode())\n')
    r = run_ddprun(["--nproc_per_node=2", "trainer"], cwd=tmp_path)
    assert r.rc == 0, r
    assert sorted(r.stdout.split("\n"))[-2:] == ["trained 0", "trained 1"], r


USAGE_ERRORS = [
    (["--nproc_per_node=0"], ["--nproc_per_node=0"]),
    (["--nproc_per_node=-1"], ["--nproc_per_node=-1"]),
    (["--nproc_per_node=abc"], ["--nproc_per_node=abc"]),
    (["--nproc_per_node=gpu"], ["--nproc_per_node=gpu"]),
    (["--nproc-per-node", "abc"], ["nproc_per_node=abc"]),
    (["--nnodes=3:2"], ["--nnodes=3:2"]),
    (["--nnodes=1:2:3"], ["--nnodes=1:2:3"]),
    (["--master_port=70000"], ["--master_port=70000"]),
    (["--max_restarts=-1"], ["--max_restarts=-1"]),
    (["--rdzv_conf=abc"], ["--rdzv_conf=abc"]),
    (["--tee=4"], ["--tee=4"]),
    (["--shutdown_timeout=-1"], ["--shutdown_timeout=-1"]),
    (["--signals_to_handle=SIGNOPE"], ["--signals_to_handle=SIGNOPE"]),
    (["-m", "--no_python"], ["--no_python", "-m"]),
    (["--nproc_per_nod3=2"], ["--nproc_per_nod3", "--nproc-per-node"]),
    (["--nnodes=1:2"], ["--nnodes=1:2", "c10d"]),
    (["--rdzv_backend=c10d", "--rdzv_endpoint=:29400"], ["--rdzv_endpoint=:29400", "no host"]),
    (["--rdzv_backend=etcd"], ["--rdzv_backend=etcd", "not supported yet"]),
    (["--numa_binding=nodes"], ["--numa_binding=nodes", "core-complex"]),
    (["--numa_binding=node", "--cpu_binding=compact"], ["--cpu_binding=compact", "give one"]),
    (["--logs_specs=x"], ["--logs_specs=x", "not supported yet"]),
]


@pytest.mark.parametrize("options,expected", USAGE_ERRORS,
                         ids=[" ".join(o) for o, _ in USAGE_ERRORS])
def test_usage_error_exits_2_naming_option(options, expected, tmp_path):
    marker = tmp_path / "started"
    r = run_ddprun([*options, *sh(f"touch {marker}")])
    assert r.rc == 2, r
    for text in expected:
        assert text in r.stderr, f"{text!r} missing\n{r}"
    assert not marker.exists(), "a worker started despite the usage error"


def test_no_program_is_usage_error():
    r = run_ddprun(["--nproc_per_node=2"])
    assert r.rc == 2, r
    assert "no program" in r.stderr, r


@pytest.mark.parametrize("var,value", [("PET_NPROC_PER_NODE", "abc"), ("PET_NO_PYTHON", "maybe")])
def test_invalid_pet_env_value_names_the_variable(var, value, tmp_path):
    marker = tmp_path / "started"
    # /bin/sh runs directly without --no_python, so PET_NO_PYTHON is read.
    r = run_ddprun(["/bin/sh", "-c", f"touch {marker}"], env=base_env(**{var: value}))
    assert r.rc == 2, r
    assert f"{var}={value}" in r.stderr, r
    assert not marker.exists()


def _count_workers(stdout):
    return sorted(line for line in stdout.splitlines() if line.startswith("worker "))


@pytest.mark.parametrize("option", ["--nproc_per_node=2", "--nproc-per-node=2",
                                    "--nproc_per_node 2", "--nproc-per-node 2"])
def test_nproc_per_node_spellings(option):
    r = run_ddprun([*option.split(), *sh('echo "worker $LOCAL_RANK"')])
    assert r.rc == 0, r
    assert _count_workers(r.stdout) == ["worker 0", "worker 1"], r


def test_nproc_per_node_from_pet_env():
    r = run_ddprun(sh('echo "worker $LOCAL_RANK"'), env=base_env(PET_NPROC_PER_NODE="3"))
    assert r.rc == 0, r
    assert _count_workers(r.stdout) == ["worker 0", "worker 1", "worker 2"], r


def test_command_line_wins_over_pet_env():
    r = run_ddprun(["--nproc-per-node=2", *sh('echo "worker $LOCAL_RANK"')],
                   env=base_env(PET_NPROC_PER_NODE="3"))
    assert r.rc == 0, r
    assert _count_workers(r.stdout) == ["worker 0", "worker 1"], r


def test_arguments_after_program_pass_through_untouched():
    r = run_ddprun(["--no_python", "/bin/sh", "-c", 'printf "<%s>\\n" "$@"', "x",
                    "--nproc_per_node=5", "-m", "a b", "--", "--no_python"])
    assert r.rc == 0, r
    assert r.stdout.splitlines() == ["<--nproc_per_node=5>", "<-m>", "<a b>", "<-->",
                                     "<--no_python>"], r


def test_py_script_runs_under_python_exec_with_u(tmp_path):
    script = write_script(tmp_path, "train.py", (
        "import sys\n"
        "print('exe', sys.executable)\n"
        "print('orig_argv', sys.orig_argv)\n"), executable=False)
    r = run_ddprun([script, "--lr", "0.1"])
    assert r.rc == 0, r
    lines = r.stdout.splitlines()
    assert f"exe {PYTHON}" in lines, r
    assert f"orig_argv {[PYTHON, '-u', str(script), '--lr', '0.1']}" in lines, r


@pytest.mark.parametrize("ending,advised", [
    ("raise RuntimeError('checkpoint 7 is corrupt')", True),
    ("sys.exit('checkpoint 7 is corrupt')", False),
])
def test_a_python_worker_is_advised_record_only_where_it_would_help(tmp_path, ending, advised):
    """@record writes an error file for an exception leaving the entry point; sys.exit("...")
    never reaches it, and advising it there sent users decorating in vain (attack 83)."""
    script = write_script(tmp_path, "train.py", f"import sys\n{ending}\n", executable=False)
    r = run_ddprun([script], cwd=tmp_path)
    assert r.rc == 1, r
    root = r.stderr.split("Root Cause (first observed failure):", 1)[1]
    assert ("decorate the entry point with" in root) == advised, r
    assert ("it exited without raising: sys.exit()" in root) == (not advised), r
    assert "checkpoint 7 is corrupt" in root, r


def test_a_silent_sys_exit_is_not_advised_record(tmp_path):
    """sys.exit(4) printing nothing: ddprun read the worker's stderr and saw no traceback, yet
    advised @record, which never records SystemExit (attack 87)."""
    script = write_script(tmp_path, "train.py", "import sys\nsys.exit(4)\n", executable=False)
    r = run_ddprun([script], cwd=tmp_path)
    assert r.rc == 4, r
    assert "decorate the entry point" not in r.stderr, r
    assert "it exited without raising: sys.exit()" in r.stderr, r


def test_module_runs_with_dash_m(tmp_path):
    write_script(tmp_path, "ddprun_e2e_mod.py", (
        "import sys\n"
        "print('module', __name__, sys.argv[1:])\n"), executable=False)
    r = run_ddprun(["-m", "ddprun_e2e_mod", "arg1"], env=base_env(PYTHONPATH=str(tmp_path)))
    assert r.rc == 0, r
    assert "module __main__ ['arg1']" in r.stdout.splitlines(), r


def test_restarts_until_success(tmp_path):
    seen = tmp_path / "attempts"
    script = (f'echo "$TORCHELASTIC_RESTART_COUNT" >> {seen}; '
              '[ "$TORCHELASTIC_RESTART_COUNT" -ge 2 ] || exit 7')
    r = run_ddprun(["--max_restarts=2", *sh(script)])
    assert r.rc == 0, r
    assert seen.read_text().split() == ["0", "1", "2"]


def test_restarts_exhausted_returns_worker_code(tmp_path):
    seen = tmp_path / "attempts"
    r = run_ddprun(["--max_restarts=1", *sh(f'echo "$TORCHELASTIC_RESTART_COUNT" >> {seen}; exit 9')])
    assert r.rc == 9, r
    assert seen.read_text().split() == ["0", "1"]
    assert r.stderr.count("Root Cause (first observed failure):") == 1, r


def _probe_facts(stdout, prefix=""):
    fds, pgid = {}, None
    for line in stdout.splitlines():
        assert line.startswith(prefix), f"unexpected line {line!r}"
        line = line[len(prefix):]
        m = re.match(r"fd (\d+) -> (.*)$", line)
        if m:
            fds[int(m.group(1))] = m.group(2)
        elif line.startswith("pgid_is_pid "):
            pgid = line.split()[1]
    return fds, pgid


def test_redirected_worker_has_no_leaked_descriptors(tmp_path):
    r = run_ddprun(["--nproc_per_node=2", "--redirects=3", f"--log_dir={tmp_path}",
                    "--no_python", FD_PROBE])
    assert r.rc == 0, r
    (run,) = list(tmp_path.iterdir())
    for rank in (0, 1):
        fds, pgid = _probe_facts((run / "attempt_0" / str(rank) / "stdout.log").read_text())
        assert sorted(fds) == [0, 1, 2], r
        assert fds[0] == "/dev/null"
        assert fds[1].endswith(f"attempt_0/{rank}/stdout.log"), fds
        assert fds[2].endswith(f"attempt_0/{rank}/stderr.log"), fds
        assert pgid == "1"


@pytest.mark.parametrize("tee", [None, "--tee=3"])
def test_worker_has_no_leaked_descriptors(tee, tmp_path):
    assert FD_PROBE.exists(), f"{FD_PROBE} not built"
    args = ["--nproc_per_node=2", f"--log_dir={tmp_path}"] + ([tee] if tee else [])
    r = run_ddprun([*args, "--no_python", FD_PROBE])
    assert r.rc == 0, r
    if tee:
        for rank in (0, 1):
            lines = "\n".join(l for l in r.stdout.splitlines() if l.startswith(f"[default{rank}]:"))
            fds, pgid = _probe_facts(lines, f"[default{rank}]:")
            assert sorted(fds) == [0, 1, 2], r
            assert fds[0] == "/dev/null", r
            assert pgid == "1", r
    else:
        # Both workers write to the same console; each prints fds 0,1,2 and pgid_is_pid.
        lines = r.stdout.splitlines()
        fd_lines = [l for l in lines if l.startswith("fd ")]
        nums = sorted(int(l.split()[1]) for l in fd_lines)
        assert nums == [0, 0, 1, 1, 2, 2], r
        assert all(l == "fd 0 -> /dev/null" for l in fd_lines if l.startswith("fd 0 ")), r
        assert lines.count("pgid_is_pid 1") == 2, r


def test_exec_failure_at_spawn_exits_127(tmp_path):
    # Passes the launcher's checks (an executable file) but execve fails: an interpreter named
    # by a relative path (the kernel looks it up from the worker's working directory).
    prog = write_script(tmp_path, "bad", "#!nonexistent-interpreter\n")
    r = run_ddprun(["--nproc_per_node=2", "--no_python", prog])
    assert r.rc == 127, r
    assert str(prog) in r.stderr, r
    # No pid to name: it never ran.
    assert re.search(rf"the job failed: [^\n]*rank \d \(local_rank \d\) could not be started: "
                     rf"start {re.escape(str(prog))}: No such file or directory", r.stderr), r
    assert r.elapsed < 5, r


def test_worker_succeeding_early_does_not_stop_others(tmp_path):
    # Rank 0 exits 0 at once; rank 1 finishes its work after that and must not be stopped.
    script = (f'if [ "$LOCAL_RANK" = 0 ]; then touch {tmp_path}/r0; exit 0; fi; '
              f'while [ ! -f {tmp_path}/r0 ]; do sleep 0.01; done; sleep 0.2; echo "rank 1 done"')
    r = run_ddprun(["--nproc_per_node=2", *sh(script)])
    assert r.rc == 0, r
    assert r.stdout.splitlines() == ["rank 1 done"], r


def test_temporary_log_dir_removed_after_success(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = run_ddprun(sh("echo hi"), env=base_env(TMPDIR=str(tmp)))
    assert r.rc == 0, r
    assert list(tmp.iterdir()) == [], r


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["doctor", "--json"],
                                  ["--print_completion", "bash"]])
def test_printing_to_a_full_stdout_exits_74(args):
    """The text went nowhere (a full disk, /dev/full): said, and exit 74, not 0 (found by an
    attacking helper); a reader that went away (| head) is no error."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(DDPRUN), *args], stdout=full, stderr=subprocess.PIPE, text=True,
                           env=base_env(), timeout=60)
    assert r.returncode == 74, r.stderr
    assert "writing to its stdout: No space left on device" in r.stderr, r.stderr
    head = subprocess.run(f"'{DDPRUN}' {' '.join(args)} | head -c 10 > /dev/null; "
                          "echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, env=base_env(), timeout=60)
    assert head.stdout.strip() in ("0", "1"), head  # doctor: 1 when a check fails


def test_a_rank_that_raised_first_but_exited_last_is_the_root_cause(tmp_path):
    """Rank 1 raises at 1 s (@record writes its error file) but a thread that is not a daemon
    keeps it alive; rank 0 gives up on it at 3 s and exits first. torchrun takes the oldest error
    file as the root cause; ddprun named rank 0's later error (found by an attacking helper)."""
    script = write_script(tmp_path, "raised_first.py", """
import os, threading, time
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    if os.environ["RANK"] == "1":
        threading.Thread(target=time.sleep, args=(20,)).start()
        time.sleep(1)
        raise RuntimeError("corrupt shard on rank 1")
    time.sleep(3)
    raise RuntimeError("secondary: rank 0 gave up waiting for rank 1")
main()
""", executable=False)
    r = run_ddprun(["--nproc_per_node=2", script], timeout=60)
    assert r.rc == 1, r  # what rank 1 raised, not the SIGTERM that ended it (143)
    root = r.stderr.split("Root Cause (first observed failure):", 1)[1]
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)", root), r.stderr
    assert "RuntimeError: corrupt shard on rank 1" in root, r.stderr
    assert "it raised first (its error file is the oldest)" in root, r.stderr
    assert r.elapsed < 15, r


def test_a_rank_killed_while_ddprun_looked_late_is_the_root_cause_not_its_victims(tmp_path):
    """Rank 2 SIGKILLed while ddprun did not run (stopped here; a starved host in life): the
    others raised "Connection closed by peer" at once, and their error files, whole seconds,
    were older than the exit ddprun saw for rank 2. A victim was named, exit 1 (found by an
    attacking helper). A lost peer is no cause where a rank near it died."""
    from trainlib import TRAIN, rank_pids, train_env
    p = subprocess.Popen([str(DDPRUN), "--nproc_per_node=3", f"--log_dir={tmp_path}", TRAIN,
                          "--steps", "100000", "--width", "16", "--depth", "1"],
                         env=train_env(OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        rank2 = rank_pids(p.pid, 3)[2]
        time.sleep(1.5)  # training
        p.send_signal(signal.SIGSTOP)
        os.kill(rank2, signal.SIGKILL)
        time.sleep(2.5)
        p.send_signal(signal.SIGCONT)
        _, err = p.communicate(timeout=60)
    finally:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait()
    assert p.returncode == 137, err
    root = err.split("Root Cause (first observed failure):", 1)[1]
    assert re.search(r"rank\s*: 2 \(local_rank: 2\)", root), err
    assert "(SIGKILL)" in root, err


@pytest.mark.parametrize("args,env", [
    (["--local_addr="], {}),  # --local_addr=$NODE_IP with NODE_IP unset
    ([], {"PET_LOCAL_ADDR": ""}),
    ([], {"PET_START_METHOD": ""}),
    (["--signals_to_handle=SIGTERM, SIGINT"], {}),
    ([], {"PET_SIGNALS_TO_HANDLE": "SIGTERM , SIGINT"}),
    ([], {"PET_STANDALONE": "2"}),  # bool(int(v))
    ([], {"PET_STANDALONE": " +01"}),
], ids=["empty-local_addr", "empty-PET_LOCAL_ADDR", "empty-PET_START_METHOD",
        "signals-with-spaces", "PET-signals-with-spaces", "PET_STANDALONE=2",
        "PET_STANDALONE=+01"])
def test_values_torchrun_takes_are_taken(args, env):
    """What torchrun runs with, ddprun refused (exit 2; found by an attacking helper): an empty
    --local_addr (not given), an empty PET_START_METHOD (no effect), signal names with spaces
    after the commas (torchrun strips them), a PET_ switch as any whole number."""
    r = run_ddprun([*args, *sh('echo "worker $LOCAL_RANK"')], env=base_env(**env))
    assert r.rc == 0, r
    assert _count_workers(r.stdout) == ["worker 0"], r


@pytest.mark.parametrize("options, label, last", [
    ([], "its last stderr line", "progress on stderr"),
    (["--redirects=3"], "its last stderr line", "progress on stderr"),
    (["--tee=3"], "its last output line", "FATAL: real reason on stdout"),
])
def test_the_reports_last_line_says_which_streams_it_is_from(tmp_path, options, label, last):
    """Where ddprun read only stderr, the report called an earlier stderr line "its last output
    line" while the worker's last words were on stdout (attack 81)."""
    script = write_script(tmp_path, "w.py", (
        "import sys\nprint('progress on stderr', file=sys.stderr, flush=True)\n"
        "print('FATAL: real reason on stdout', flush=True)\nsys.exit(3)\n"), executable=False)
    r = run_ddprun([*options, f"--log_dir={tmp_path / 'logs'}", script])
    assert r.rc == 3, r
    assert f"{label}: {last}" in r.stderr, r
