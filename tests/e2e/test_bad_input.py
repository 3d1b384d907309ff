"""Every value ddprun reads is checked: a bad one is a usage error (exit 2) that names the
option or variable and says what is accepted, before any worker starts."""

import re
import shlex
import subprocess
import pytest

from conftest import DDPRUN, base_env, run_ddprun, sh

SECONDS = "a number of seconds"
NAME_CHARS = "characters from A-Z, a-z, 0-9, '.', '_' and '-'"

BAD_OPTIONS = [
    # NaN as a duration (with --shutdown_timeout=nan a worker ignoring SIGTERM was never killed).
    (["--monitor_interval=nan"], ["invalid --monitor_interval=nan: " + SECONDS]),
    (["--shutdown_timeout=nan"], ["invalid --shutdown_timeout=nan: " + SECONDS]),
    (["--hang_timeout=nan"], ["invalid --hang_timeout=nan: " + SECONDS]),
    (["--startup_timeout=nan"], ["invalid --startup_timeout=nan: " + SECONDS]),
    (["--shutdown-timeout=inf"], ["invalid --shutdown_timeout=inf: " + SECONDS]),
    (["--rdzv_conf=join_timeout=nan"], ["invalid --rdzv_conf join_timeout=nan: " + SECONDS]),
    (["--rdzv_conf=timeout=nan"], ["invalid --rdzv_conf timeout=nan: " + SECONDS]),
    (["--rdzv_conf=last_call_timeout=nan"],
     ["invalid --rdzv_conf last_call_timeout=nan: " + SECONDS]),
    (["--rdzv_conf=keep_alive_interval=nan"],
     ["invalid --rdzv_conf keep_alive_interval=nan: " + SECONDS]),
    (["--rdzv_conf=read_timeout=nan"], ["invalid --rdzv_conf read_timeout=nan: " + SECONDS]),
    # Shorter than a reply can take: the agent failed against its own store, named as foreign.
    (["--rdzv_conf=read_timeout=0.0001"],
     ["invalid --rdzv_conf read_timeout=0.0001: at least 0.1 seconds"]),
    # A count given as a fraction, or with junk around it.
    (["--rdzv_conf=keep_alive_max_attempt=2.5"],
     ["invalid --rdzv_conf keep_alive_max_attempt=2.5: a whole number >= 1"]),
    (["--max_restarts=1.5"], ["invalid --max_restarts=1.5: a number from 0 to 1073741824"]),
    (["--nproc_per_node=+-2"], ["invalid --nproc_per_node=+-2"]),
    # A per-rank stream selection naming a local rank that does not exist.
    (["-t", "9:1"], ["invalid --tee=9:1", "local ranks from 0 to 0"]),
    (["--nproc_per_node=2", "-r", "0:3,2:3"], ["invalid --redirects=0:3,2:3", "from 0 to 1"]),
    # Names that end up in paths, store keys and line prefixes.
    (["--role=a\nb"], ["invalid --role=a\\nb: 1 to 128 " + NAME_CHARS]),
    (["--rdzv_id=../../x"], ["invalid --rdzv_id=../../x: 1 to 128 " + NAME_CHARS]),
    # An endpoint that names no host (this exited 1 after trying to bind it).
    (["--rdzv_endpoint=:::"], ["invalid --rdzv_endpoint=:::", "HOST[:PORT]"]),
    (["--rdzv_backend=c10d", "--rdzv_endpoint=:::"], ["invalid --rdzv_endpoint=:::"]),
    (["--rdzv_backend=c10d", "--rdzv_endpoint=node1:http"], ["invalid --rdzv_endpoint=node1:http"]),
    (["--rdzv_conf=is_host=maybe"], ["invalid --rdzv_conf is_host=maybe: 1, true, True, 0"]),
    (["--master_addr=a b"], ["invalid --master_addr=a b: a host name or an IP address"]),
    (["--local_addr=x;y"], ["invalid --local_addr=x;y: a host name or an IP address"]),
]


@pytest.mark.parametrize("options,expected", BAD_OPTIONS, ids=lambda v: repr(v))
def test_bad_option_exits_2_naming_it(options, expected, tmp_path):
    marker = tmp_path / "started"
    log_dir = tmp_path / "logs" / "deep"
    r = run_ddprun(["--log_dir", log_dir, *options, *sh(f"touch {marker}")], cwd=tmp_path)
    assert r.rc == 2, r
    for text in expected:
        assert text in r.stderr, f"{text!r} missing\n{r}"
    assert not marker.exists(), "a worker started despite the usage error"
    assert not log_dir.exists(), "the log directory was made despite the usage error"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "something was created"


BAD_VARIABLES = [
    ({"LOGLEVEL": "garbage"},
     ["invalid LOGLEVEL=garbage: TRACE, DEBUG, INFO, WARNING, WARN, ERROR, CRITICAL or OFF"]),
    ({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "nan"},
     ["invalid TORCH_ELASTIC_SHUTDOWN_TIMEOUT=nan: " + SECONDS]),
    ({"PET_SHUTDOWN_TIMEOUT": "nan"},
     ["PET_SHUTDOWN_TIMEOUT=nan: invalid --shutdown_timeout=nan: " + SECONDS]),
    ({"PET_RDZV_ID": "../x"}, ["PET_RDZV_ID=../x: invalid --rdzv_id=../x"]),
    ({"PET_SLURM": "bogus"}, ["PET_SLURM=bogus: invalid --slurm=bogus: auto, node or off"]),
    ({"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "5", "SLURM_STEP_NUM_NODES": "2",
      "SLURM_NODEID": "0"}, ["a Slurm step of 2 nodes without its node list"]),
    ({"PET_RDZV_CONF": "read_timeout=-1"}, ["invalid --rdzv_conf read_timeout=-1: " + SECONDS]),
]


@pytest.mark.parametrize("variables,expected", BAD_VARIABLES, ids=lambda v: repr(v))
def test_bad_environment_variable_exits_2_naming_it(variables, expected, tmp_path):
    marker = tmp_path / "started"
    r = run_ddprun(sh(f"touch {marker}"), env=base_env(**variables), cwd=tmp_path)
    assert r.rc == 2, r
    for text in expected:
        assert text in r.stderr, f"{text!r} missing\n{r}"
    assert not marker.exists(), "a worker started despite the usage error"


def test_loglevel_in_any_case_is_accepted(tmp_path):
    r = run_ddprun(sh("true"), env=base_env(LOGLEVEL="debug"), cwd=tmp_path)
    assert r.rc == 0, r
    assert "debug]" in r.stderr, r


def test_good_values_still_run(tmp_path):
    marker = tmp_path / "started"
    r = run_ddprun(["--role=trainer-1", "--rdzv_id=job_42.a", "--shutdown_timeout=0.5",
                    "--rdzv_conf=join_timeout=5,keep_alive_max_attempt=3", "-t", "0:3",
                    "--log_dir", tmp_path / "logs", *sh(f"touch {marker}")], cwd=tmp_path)
    assert r.rc == 0, r
    assert marker.exists()
    # A one-node job without --master_port runs as --standalone: as under torchrun, the run
    # id is then a random UUID, whatever --rdzv_id said.
    runs = [p.name for p in (tmp_path / "logs").iterdir()]
    assert len(runs) == 1 and re.match(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-", runs[0]), runs


@pytest.mark.parametrize("closed", [">&-", "<&-", "2>&-", "<&- >&- 2>&-"])
def test_closed_standard_streams_do_not_crash_the_launcher(tmp_path, closed):
    """ddprun started with stdin, stdout or stderr closed (it aborted in libuv when a file it
    opened took the number): /dev/null stands in, the job runs, and it says so where it can."""
    marks = tmp_path / "marks"
    marks.mkdir()
    args = " ".join(shlex.quote(str(a)) for a in [DDPRUN, "--nproc_per_node=2", *sh(
        f'echo "rank $RANK"; touch {marks}/$RANK')])
    r = subprocess.run(["/bin/sh", "-c", f"exec {args} {closed}"], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in marks.iterdir()) == ["0", "1"]
    for name, redirect in (("stdin", "<&-"), ("stdout", ">&-")):
        if redirect in closed and "2>&-" not in closed:
            assert f"ddprun's {name} was closed: /dev/null stands in for it" in r.stderr, r.stderr
    if ">&-" not in closed:
        assert "rank 0" in r.stdout and "rank 1" in r.stdout, r.stdout


@pytest.mark.parametrize("made_again", [False, True], ids=["gone", "made-again"])
def test_a_removed_working_directory_is_refused_naming_the_fix(tmp_path, made_again):
    """Started from a directory removed under the shell (a checkout cleaned or cloned again),
    workers failed in their own ways (torchrun: 'oneMKL FATAL ERROR: Cannot load
    libtorch_cpu.so'). ddprun names the directory and the way back into it."""
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "started"
    args = " ".join(shlex.quote(str(a)) for a in [DDPRUN, *sh(f"touch {marker}")])
    again = f"mkdir {work}; " if made_again else ""
    r = subprocess.run(["/bin/sh", "-c", f"cd {work} && rmdir {work} && {again}exec {args}"],
                       env=base_env(PWD=str(work)), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert f"the working directory {work} was removed after this shell entered it" in r.stderr, \
        r.stderr
    fix = f"`cd {work}` enters the directory of that name" if made_again else \
        "cd to an existing directory"
    assert fix in r.stderr, r.stderr
    assert not marker.exists(), "a worker started in the removed directory"
