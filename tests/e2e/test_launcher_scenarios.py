"""PyTorch's own launcher scenarios, run against the launcher named by $DDPRUN: the built
ddprun (as CTest runs it) or, side by side, torchrun (DDPRUN=/path/to/torchrun): the same
file passes against both.

Source: pytorch/pytorch test/distributed/launcher/test_run.py (formerly run_test.py),
launch_test.py and their workers under test/distributed/launcher/bin/ (test_script.py,
test_script.sh, test_script_init_method.py, test_script_is_torchelastic_launched.py,
test_script_local_rank.py), and bin/zombie_test.py of
test/distributed/elastic/multiprocessing/api_test.py. Our own workers are under
programs/launcher/; small worlds (2 workers) and short timeouts keep it quick.

Ported scenarios (PyTorch's test name -> ours):
  test_launch_user_script_python              test_user_script_python
  test_launch_user_script_python_caffe2_bc    test_user_script_static_master_addr_port
  test_launch_user_script_bash                test_user_script_no_python,
                                              test_no_python_with_module_is_refused
  test_launch_user_script_default_nproc       test_default_nproc_is_one
  test_launch_with_env_vars                   test_pet_environment_variables,
                                              test_pet_no_python_with_pet_module_is_refused
  test_nproc_launch_number_configurations     test_nproc_types[2]
  test_nproc_launch_auto_configurations       test_nproc_types[auto], [cpu]
  test_nproc_launch_unknown_configurations    test_invalid_launch_config[nproc unknown]
  test_nproc_gpu_launch_configurations        test_nproc_gpu_without_gpus_is_an_error (mocked
                                              GPUs there; here none is visible)
  test_launch_elastic                         test_elastic_c10d_single_agent (the quoted
                                              --rdzv-conf as one argv element, no shell)
  test_launch_elastic_worker_raise_exception  test_elastic_worker_exception_fails_the_job
  test_launch_elastic_multiple_agents         test_elastic_two_agents
  test_launch_standalone                      test_standalone
  test_launch_run_path                        test_run_path[absolute], [relative sub/rp.py]
  test_min_max_nodes_parse                    test_invalid_launch_config[nnodes ...]
  test_is_torchelastic_launched               test_is_torchelastic_launched[no logs_specs]
  test_is_torchelastic_launched_with_logs_spec_defined
                                              test_is_torchelastic_launched[default]
  test_logs_logs_spec_entrypoint_must_be_defined
                                              test_unknown_logs_specs_is_refused
  test_is_not_torchelastic_launched           test_is_not_torchelastic_launched
  test_init_method_tcp_with_torchelastic      test_init_method[tcp]
  test_init_method_env_with_torchelastic      test_init_method[env]
  test_capture_logs_using_default_logs_specs  test_redirect_and_tee_with_prefix_template
  launch_test.test_launch_without_env         test_local_rank_argument_macro (torchrun's
                                              ${local_rank} argument macro, the successor of
                                              torch.distributed.launch's --local-rank)
  launch_test.test_launch_with_env            test_local_rank_environment (--use-env style)
  api_test.test_subprocess_context_close      test_failure_stops_sibling_and_its_child
Also: -m (test_module), --max-restarts with a failing worker (test_max_restarts_*), and
torchrun's other launch-config checks (test_invalid_launch_config).
Not ported: test_launch_elastic_agent_raise_exception and test_launch_shutdown (they mock
torchrun's agent and rendezvous handler in-process), test_virtual_local_rank and the xpu
case (GPU/XPU only; test_torchrun_compat.py checks --virtual-local-rank's environment).

Where the two launchers legitimately differ, only the shared behaviour is asserted (exit
status class, files written, worker environment); the few ddprun-specific assertions are
under is_ddprun(): ddprun exits 2 on every usage error where torchrun raises (exit 1), and
counts the CPUs it may run on for nproc cpu/auto where torchrun takes os.cpu_count().
The last section checks recent ddprun changes: --stdin (auto gives local rank 0 the
launcher's stdin, so input() and a breakpoint()'s pdb read it; none; all, as torchrun),
the interpreter of the environment ddprun is installed in, and a rank that failed on its own
while the group stopped listed under the report's Failures. Those torchrun shares run
against both; the ddprun-only ones skip under torchrun, with the reason.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import DDPRUN, base_env, free_port, pid_alive, wait_for

PROGRAMS = Path(__file__).resolve().parent / "programs" / "launcher"
TOUCH = PROGRAMS / "touch_rank.py"
TIMEOUT = 90.0  # one launcher run; torchrun alone takes seconds to import torch on 2 cores


def is_ddprun():
    """False when this file runs against torchrun (DDPRUN=.../torchrun)."""
    return "torchrun" not in Path(DDPRUN).name


def ddprun_only(reason):
    return pytest.mark.skipif(not is_ddprun(), reason=f"ddprun only: {reason}")


def launch(args, tmp_path, env=None, cwd=None, stdin=subprocess.DEVNULL, input=None,
           timeout=TIMEOUT):
    """Runs the launcher with ARGS (each one argv element, no shell) to completion; returns
    the CompletedProcess. On timeout kills the launcher's process group and fails the test."""
    proc = subprocess.Popen([str(DDPRUN), *map(str, args)], env=env or scenario_env(),
                            cwd=cwd or tmp_path,
                            stdin=subprocess.PIPE if input is not None else stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{DDPRUN} {args} did not finish within {timeout}s\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def scenario_env(**overrides):
    """The suite's environment plus PyTorch's sentinel, which every worker must inherit."""
    return base_env(TEST_SENTINEL_PARENT="FOOBAR", **overrides)


def touched(directory):
    """The rank files a run left (rank numbers as strings), without helper files."""
    return {p.name for p in Path(directory).iterdir() if p.name.isdigit()}


def rank_envs(directory):
    return {int(p.name): json.loads(p.read_text()) for p in Path(directory).iterdir()
            if p.name.isdigit()}


def out_dir(tmp_path, name="out"):
    d = tmp_path / name
    d.mkdir()
    return d


def assert_ok(proc):
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def assert_refused(proc, directory=None):
    """A launch-config error: no worker ran, a non-zero exit (torchrun raises: 1; ddprun's
    usage errors: 2)."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    if is_ddprun():
        assert proc.returncode == 2, proc.stderr
    if directory is not None:
        assert touched(directory) == set()


# --- user scripts ------------------------------------------------------------------------


def test_user_script_python(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nnodes=1", "--nproc-per-node=2", f"--rdzv-id={uuid.uuid4().int}",
                   "--monitor-interval=1", "--start-method=spawn", TOUCH, f"--touch-dir={d}"],
                  tmp_path)
    assert_ok(proc)
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1]
    for rank, env in envs.items():
        assert env["TEST_SENTINEL_PARENT"] == "FOOBAR"
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (str(rank), str(rank), "2")
        assert (env["GROUP_RANK"], env["ROLE_NAME"], env["LOCAL_WORLD_SIZE"]) == \
            ("0", "default", "2")
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["argv"] == [f"--touch-dir={d}"]


def test_user_script_static_master_addr_port(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nnodes=1", "--nproc-per-node=2", "--master-addr=localhost",
                   f"--master-port={free_port()}", "--node-rank=0", TOUCH, f"--touch-dir={d}"],
                  tmp_path)
    assert_ok(proc)
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1]
    assert {e["MASTER_ADDR"] for e in envs.values()} == {"localhost"}
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 1


def test_user_script_no_python(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nnodes=1", "--nproc-per-node=2", f"--rdzv-id={uuid.uuid4().int}",
                   "--no-python", PROGRAMS / "touch_rank.sh", d], tmp_path)
    assert_ok(proc)
    assert touched(d) == {"0", "1"}
    assert f"creating {d}/0" in proc.stdout


def test_no_python_with_module_is_refused(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", "--no-python", "--module", PROGRAMS / "touch_rank.sh",
                   d], tmp_path)
    assert_refused(proc, d)


def test_default_nproc_is_one(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nnodes=1", f"--rdzv-id={uuid.uuid4().int}", "--no-python",
                   PROGRAMS / "touch_rank.sh", d], tmp_path)
    assert_ok(proc)
    assert touched(d) == {"0"}


PET = {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_MONITOR_INTERVAL": "1",
       "PET_START_METHOD": "spawn", "PET_NO_PYTHON": "1"}


def test_pet_environment_variables(tmp_path):
    d = out_dir(tmp_path)
    env = scenario_env(PET_RDZV_ID=str(uuid.uuid4().int), PET_MODULE="0", **PET)
    proc = launch([PROGRAMS / "touch_rank.sh", d], tmp_path, env=env)
    assert_ok(proc)
    assert touched(d) == {"0", "1"}


def test_pet_no_python_with_pet_module_is_refused(tmp_path):
    d = out_dir(tmp_path)
    proc = launch([PROGRAMS / "touch_rank.sh", d], tmp_path,
                  env=scenario_env(PET_MODULE="1", **PET))
    assert_refused(proc, d)


def test_module(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", "-m", "touch_rank", f"--touch-dir={d}"], tmp_path,
                  env=scenario_env(PYTHONPATH=str(PROGRAMS)))
    assert_ok(proc)
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1]
    assert {e["__name__"] for e in envs.values()} == {"__main__"}


# --- nproc types and launch-config validation ---------------------------------------------


def cpu_count():
    # ddprun: the CPUs it may run on (ddprun(1), CPUS); torchrun: os.cpu_count().
    return len(os.sched_getaffinity(0)) if is_ddprun() else os.cpu_count()


@pytest.mark.parametrize("nproc", ["2", "cpu", "auto"])
def test_nproc_types(tmp_path, nproc):
    expected = 2 if nproc == "2" else cpu_count()
    if expected > 32:
        pytest.skip(f"{expected} CPUs: too many workers for this test")
    d = out_dir(tmp_path)
    # No GPU is visible (CUDA_VISIBLE_DEVICES=""), so auto means cpu.
    proc = launch(["--nnodes=1", f"--nproc-per-node={nproc}", "--no-python",
                   PROGRAMS / "touch_rank.sh", d], tmp_path)
    assert_ok(proc)
    assert touched(d) == {str(r) for r in range(expected)}


def test_nproc_gpu_without_gpus_is_an_error(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=gpu", "--no-python", PROGRAMS / "touch_rank.sh", d],
                  tmp_path, env=scenario_env(CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode != 0
    assert touched(d) == set()
    if not is_ddprun():
        assert "Cuda is not available" in proc.stderr


@pytest.mark.parametrize("flag", [
    "--nproc-per-node=unknown", "--nproc-per-node=0", "--nproc-per-node=-1",
    "--nnodes=2:20:30", "--nnodes=0", "--nnodes=3:2", "--nnodes=x", "--max-restarts=-1",
], ids=lambda f: f.lstrip("-").replace("=", " ").replace("-", "_"))
def test_invalid_launch_config(tmp_path, flag):
    d = out_dir(tmp_path)
    proc = launch([flag, "--no-python", PROGRAMS / "touch_rank.sh", d], tmp_path)
    assert_refused(proc, d)


def test_unknown_logs_specs_is_refused(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--run-path", "--nnodes=1", "--nproc-per-node=1",
                   "--logs_specs=DOESNOT_EXIST", TOUCH, f"--touch-dir={d}"], tmp_path)
    assert_refused(proc, d)


# --- rendezvous: c10d, standalone ------------------------------------------------------


# PyTorch passes it quoted, as one argument, with no shell to remove the quotes.
QUOTED_CONF = "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'"


def c10d_args(port, run_id):
    return ["--nnodes=1:2", "--nproc-per-node=2", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=localhost:{port}", f"--rdzv-id={run_id}", "--monitor-interval=1",
            "--start-method=spawn"]


def test_elastic_c10d_single_agent(tmp_path):
    d = out_dir(tmp_path)
    run_id = str(uuid.uuid4().int)
    proc = launch([*c10d_args(free_port(), run_id), QUOTED_CONF, TOUCH, f"--touch-dir={d}"],
                  tmp_path)
    assert_ok(proc)
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1]  # one node of at most two: a world of 2
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"2"}
    assert {e["TORCHELASTIC_RUN_ID"] for e in envs.values()} == {run_id}


def test_elastic_worker_exception_fails_the_job(tmp_path):
    d = out_dir(tmp_path)
    proc = launch([*c10d_args(free_port(), uuid.uuid4().int), QUOTED_CONF, "--max-restarts=0",
                   TOUCH, f"--touch-dir={d}", "--fail"], tmp_path)
    # The worker's RuntimeError exits 1: torchrun always exits 1, ddprun with the root cause's 1.
    assert proc.returncode == 1, proc.stderr
    assert "fails as asked (--fail)" in proc.stderr
    assert "Root Cause (first observed failure)" in proc.stderr
    assert touched(d) == set()


def test_elastic_two_agents(tmp_path):
    d = out_dir(tmp_path)
    args = [*c10d_args(free_port(), uuid.uuid4().int), "--rdzv-conf=join_timeout=60", TOUCH,
            f"--touch-dir={d}"]
    env = scenario_env()
    with open(tmp_path / "agent1.log", "w") as log:
        other = subprocess.Popen([str(DDPRUN), *map(str, args)], env=env, cwd=tmp_path,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True)
        try:
            proc = launch(args, tmp_path, env=env)
            other_rc = other.wait(timeout=TIMEOUT)
        finally:
            if other.poll() is None:
                os.killpg(other.pid, signal.SIGKILL)
                other.wait()
    assert_ok(proc)
    assert other_rc == 0, (tmp_path / "agent1.log").read_text()
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1, 2, 3]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"4"}
    assert sorted(e["GROUP_RANK"] for e in envs.values()) == ["0", "0", "1", "1"]


def test_standalone(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nnodes=1", "--nproc-per-node=2", "--standalone", "--monitor-interval=1",
                   "--start-method=spawn", TOUCH, f"--touch-dir={d}"], tmp_path)
    assert_ok(proc)
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1]
    run_ids = {e["TORCHELASTIC_RUN_ID"] for e in envs.values()}
    assert len(run_ids) == 1
    uuid.UUID(run_ids.pop())  # a random id, as torchrun's --standalone


# --- how the script runs: --run-path, local rank ---------------------------------------


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_run_path(tmp_path, where):
    d = out_dir(tmp_path)
    (tmp_path / "sub").mkdir()
    shutil.copy(TOUCH, tmp_path / "sub" / "rp.py")
    script = tmp_path / "sub" / "rp.py" if where == "absolute" else "sub/rp.py"
    proc = launch(["--run-path", "--nnodes=1", "--nproc-per-node=2", "--monitor-interval=1",
                   "--start-method=spawn", script, f"--touch-dir={d}"], tmp_path, cwd=tmp_path)
    assert_ok(proc)
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1]
    for env in envs.values():
        assert env["__name__"] == "__main__"
        assert env["argv"] == [f"--touch-dir={d}"]


def test_local_rank_environment(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", PROGRAMS / "local_rank.py", f"--out-dir={d}"],
                  tmp_path)
    assert_ok(proc)
    assert {p.name: p.read_text() for p in d.iterdir()} == {"0": "0 None", "1": "1 None"}


def test_local_rank_argument_macro(tmp_path):
    """torchrun substitutes ${local_rank} in the script's arguments (LocalElasticAgent's
    macros), the way to keep a script that wants --local-rank as the legacy launcher gave it."""
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", PROGRAMS / "local_rank.py", f"--out-dir={d}",
                   "--local-rank=${local_rank}"], tmp_path)
    assert_ok(proc)
    assert {p.name: p.read_text() for p in d.iterdir()} == {"0": "0 0", "1": "1 1"}


# --- torch.distributed in the workers --------------------------------------------------


@pytest.mark.parametrize("logs_specs", [[], ["--logs_specs=default"]],
                         ids=["no logs_specs", "default"])
def test_is_torchelastic_launched(tmp_path, logs_specs):
    out = tmp_path / "out"
    proc = launch(["--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1",
                   *logs_specs, PROGRAMS / "is_torchelastic_launched.py", f"--out-file={out}"],
                  tmp_path)
    assert_ok(proc)
    assert out.read_text() == "True"


def test_is_not_torchelastic_launched(tmp_path):
    """The control: the same worker without a launcher."""
    out = tmp_path / "out"
    subprocess.run([sys.executable, PROGRAMS / "is_torchelastic_launched.py",
                    f"--out-file={out}"], env=scenario_env(), check=True, timeout=TIMEOUT)
    assert out.read_text() == "False"


@pytest.mark.parametrize("scheme", ["env", "tcp"])
def test_init_method(tmp_path, scheme):
    d = out_dir(tmp_path)
    port = free_port()
    init = "env://" if scheme == "env" else f"tcp://localhost:{port}"
    proc = launch(["--run-path", "--nnodes=1", "--nproc-per-node=2", "--master-addr=localhost",
                   f"--master-port={port}", "--monitor-interval=1",
                   PROGRAMS / "init_method.py", f"--init-method={init}", f"--touch-dir={d}"],
                  tmp_path)
    assert_ok(proc)
    assert touched(d) == {"0", "1"}


# --- logs, restarts, stopping ----------------------------------------------------------


def test_redirect_and_tee_with_prefix_template(tmp_path):
    d = out_dir(tmp_path)
    # --redirect is argparse's (and ddprun's) unique prefix of --redirects.
    proc = launch(["--nnodes=1", "--nproc-per-node=2", "--redirect=3", "--tee=3",
                   f"--log-dir={tmp_path / 'logs'}", "--no-python", PROGRAMS / "touch_rank.sh",
                   d], tmp_path,
                  env=scenario_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]: "))
    assert_ok(proc)
    for rank in (0, 1):
        assert f"[rank{rank}]: creating {d}/{rank}" in proc.stdout
    logs = [p.read_text() for p in (tmp_path / "logs").rglob("stdout.log")]
    assert sorted(logs) == [f"creating {d}/0\n", f"creating {d}/1\n"]


def attempts(directory, rank):
    return (Path(directory) / f"attempts.{rank}").read_text().split()


def test_max_restarts_exhausted(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", "--max-restarts=2", TOUCH, f"--touch-dir={d}",
                   "--record-attempts", "--fail"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    # Every attempt's workers saw their restart count: the first run and two restarts.
    assert attempts(d, 0) == attempts(d, 1) == ["0", "1", "2"]
    assert touched(d) == set()


def test_max_restarts_recovers(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", "--max-restarts=2", TOUCH, f"--touch-dir={d}",
                   "--record-attempts", "--fail-attempts=1"], tmp_path)
    assert_ok(proc)
    envs = rank_envs(d)
    assert sorted(envs) == [0, 1]
    for env in envs.values():
        assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("1", "2")


def test_failure_stops_sibling_and_its_child(tmp_path, pid_reaper):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", "--shutdown-timeout=5", PROGRAMS / "fail_with_child.py",
                   d], tmp_path)
    assert proc.returncode == 1, proc.stderr
    pids = [int(p) for p in (d / "pids").read_text().split()]
    pid_reaper.extend(pids)
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=5,
             what=f"rank 0 and its child ({pids}) to be gone")


# --- recent ddprun changes: stdin, interpreter, failure report --------------------------


def stdin_file(tmp_path, text="hello\n"):
    path = tmp_path / "stdin.txt"
    path.write_text(text)
    return path


@ddprun_only("torchrun gives every worker its stdin")
def test_stdin_default_goes_to_local_rank_zero(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", PROGRAMS / "read_stdin.py", d], tmp_path,
                  input="hello\n")
    assert_ok(proc)
    assert {p.name: p.read_text() for p in d.iterdir()} == {"0": "line hello", "1": "EOF"}


@ddprun_only("--stdin is a ddprun option")
def test_stdin_none_gives_eof(tmp_path):
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", "--stdin=none", PROGRAMS / "read_stdin.py", d],
                  tmp_path, input="hello\n")
    assert_ok(proc)
    assert {p.name: p.read_text() for p in d.iterdir()} == {"0": "EOF", "1": "EOF"}


def test_stdin_all_reaches_every_rank(tmp_path):
    """ddprun --stdin=all gives every worker its stdin, as torchrun does by default. A regular
    file, read with pread, shows each rank the whole input (a pipe would go to one reader)."""
    d = out_dir(tmp_path)
    flags = ["--stdin=all"] if is_ddprun() else []
    with open(stdin_file(tmp_path)) as f:
        proc = launch(["--nproc-per-node=2", *flags, PROGRAMS / "read_stdin.py", d, "--pread"],
                      tmp_path, stdin=f)
    assert_ok(proc)
    assert {p.name: p.read_text() for p in d.iterdir()} == {"0": "line hello", "1": "line hello"}


def test_breakpoint_reads_pdb_commands_from_stdin(tmp_path):
    """A one-worker job stops in breakpoint() and pdb takes its commands from the launcher's
    stdin (under ddprun it read /dev/null and died of BdbQuit)."""
    proc = launch(["--nproc-per-node=1", PROGRAMS / "breakpoint_probe.py"], tmp_path,
                  env=scenario_env(PYTHONBREAKPOINT=None), input="p value * 7\nc\n")
    assert_ok(proc)
    assert "(Pdb) 42\n" in proc.stdout
    assert "after the breakpoint: 6" in proc.stdout


def fake_venv(tmp_path):
    """A venv whose bin/ holds a copy of ddprun: bin/python3 and lib/ lead to the test venv."""
    venv = Path(sys.prefix)
    fake = tmp_path / "venv"
    (fake / "bin").mkdir(parents=True)
    shutil.copy(venv / "pyvenv.cfg", fake / "pyvenv.cfg")
    (fake / "lib").symlink_to(venv / "lib")
    (fake / "bin" / "python3").symlink_to(venv / "bin" / "python3")
    shutil.copy(DDPRUN, fake / "bin" / "ddprun")
    return fake


@ddprun_only("torchrun's workers run under torchrun's own sys.executable")
def test_interpreter_of_ddprun_s_own_environment(tmp_path):
    fake = fake_venv(tmp_path)
    out = tmp_path / "which"
    env = scenario_env(PATH="/usr/bin:/bin", PYTHON_EXEC=None, VIRTUAL_ENV=None,
                       CONDA_PREFIX=None)
    proc = subprocess.run([fake / "bin" / "ddprun", PROGRAMS / "which_python.py", out], env=env,
                          cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert_ok(proc)
    python = fake / "bin" / "python3"
    assert f"under {python} (from ddprun's own environment)" in proc.stderr
    executable, version = out.read_text().split()
    assert executable == str(python)
    assert version.startswith("2.")


def test_failure_report_lists_a_rank_that_failed_on_its_own(tmp_path):
    """Rank 1 raises 0.3 s after rank 0, while the launcher stops the group (it ignores
    SIGTERM): a failure of its own, listed under Failures (ddprun used to leave it out)."""
    d = out_dir(tmp_path)
    proc = launch(["--nproc-per-node=2", "--shutdown-timeout=10", PROGRAMS / "raise_both.py", d],
                  tmp_path)
    assert proc.returncode == 1, proc.stderr
    report = proc.stderr[proc.stderr.index("Failures:"):]
    failures, root = report.split("Root Cause (first observed failure):")
    assert "<NO_OTHER_FAILURES>" not in failures
    assert "rank      : 1 (local_rank: 1)" in failures
    assert "rank      : 0 (local_rank: 0)" in root
