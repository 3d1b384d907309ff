"""Which Python runs a .py worker, and what the report says when it is the wrong one."""
import shutil

import pytest

from conftest import base_env, run_ddprun, write_script

SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no python3 in /usr/bin or /bin")
@pytest.mark.parametrize("stderr", ["console", "redirected"])
def test_a_module_the_workers_python_lacks_is_explained(tmp_path, stderr):
    """The traceback is read from stderr's pipe, or (redirected, -r 2) from the end of its log."""
    script = write_script(tmp_path, "t.py", "import ddprun_no_such_module\n", executable=False)
    logs = ["-r", "2", "--log_dir", tmp_path / "logs"] if stderr == "redirected" else []
    r = run_ddprun(["--nproc_per_node=1", *logs, script],
                   env=base_env(PYTHON_EXEC=SYSTEM_PYTHON))
    assert r.rc == 1, r
    assert f"workers run {script} under {SYSTEM_PYTHON} (from PYTHON_EXEC)" in r.stderr, r
    assert ("cause     : the workers' Python cannot import ddprun_no_such_module: they ran "
            f"{SYSTEM_PYTHON} (from PYTHON_EXEC)") in r.stderr, r
    assert "fix       : install ddprun_no_such_module into that Python's environment" in r.stderr


def test_a_failure_the_catalogue_does_not_know_gets_no_explanation(tmp_path):
    script = write_script(tmp_path, "t.py", "raise RuntimeError('boom')\n", executable=False)
    r = run_ddprun(["--nproc_per_node=1", script])
    assert r.rc == 1, r
    assert "RuntimeError: boom" in r.stderr
    assert "cause     :" not in r.stderr and "fix       :" not in r.stderr, r
