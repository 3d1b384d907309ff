"""A hang's debug dump under attack: the user's Ctrl-C while its stack tools run, and ddprun
SIGKILLed in the middle of it. A stack tool that takes its time (gdb on a large process takes
seconds) is played by a fake eu-stack first on PATH that sleeps; each run's tool carries a token
of its own, so that the test finds (and at the end kills) only its own."""
import os
import signal
import subprocess
import time
import uuid

from conftest import DDPRUN, PYTHON, base_env, free_port, pid_alive, wait_for

# Beats once, then hangs: --hang_timeout declares it hung and dumps it.
HANG = """
import os, time
os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
time.sleep(1000)
"""


def pids_with(token):
    """The processes whose command line holds `token`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def hang_with_a_slow_tool(tmp_path):
    """ddprun with two hanging workers and a stack tool that sleeps 60 s; returns the process
    and the tool's token once the dump's tool runs."""
    token = f"ddprun_slow_tool_{uuid.uuid4().hex}"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "eu-stack"
    tool.write_text(f"#!/bin/bash\nexec -a {token} sleep 60\n")
    tool.chmod(0o755)
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    env = base_env(PATH=f"{bin_dir}:{os.environ['PATH']}")
    proc = subprocess.Popen([str(DDPRUN), "--log_dir", str(tmp_path / "logs"), "--hang_timeout=2",
                             "--shutdown_timeout=2", "--nproc_per_node=2", "--no_python", PYTHON,
                             str(script)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        wait_for(lambda: pids_with(token), timeout=30, what="the dump's stack tool")
    except BaseException:
        proc.kill()
        proc.wait()
        proc.stderr.close()
        raise
    return proc, token


def test_ctrl_c_during_a_dump_cuts_it_short(tmp_path):
    """Twice Ctrl-C while the tools ran: ddprun acted only when every tool had finished or hit
    its 5 s limit (found by an attacking helper). A terminating signal now stops the tools at
    once: the dump ends with what it has, and the signal is acted on."""
    proc, token = hang_with_a_slow_tool(tmp_path)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=20)
    finally:
        for pid in pids_with(token):
            os.kill(pid, signal.SIGKILL)
    took = time.monotonic() - sent
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert rc == 128 + signal.SIGINT, err
    assert took < 2.5, f"exited {took:.1f} s after SIGINT\n{err}"
    dumps = list((tmp_path / "logs").rglob("rank_0.txt"))
    assert dumps, err
    assert "[eu-stack cut short: ddprun was told to stop during the dump" in dumps[0].read_text()


def test_a_launcher_killed_during_a_dump_leaves_no_stack_tool_behind(tmp_path):
    """SIGKILL of ddprun while the tools ran left them running, reparented to init, with no
    limit on their time (found by an attacking helper): they carry the job's mark now, and the
    guardian's sweep kills them."""
    proc, token = hang_with_a_slow_tool(tmp_path)
    tools = pids_with(token)
    proc.kill()
    proc.wait()
    proc.stderr.close()
    try:
        gone = wait_for(lambda: not any(pid_alive(p) for p in tools), timeout=10,
                        what="the stack tools to be gone")
    finally:
        for pid in pids_with(token):
            os.kill(pid, signal.SIGKILL)
    assert gone


def dump_signal_in(pid, field):
    """Whether /proc/PID/status has ddprun dump's signal (SIGRTMIN+2) in the mask `field`
    (SigCgt: caught, SigIgn: ignored)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith(field + ":"))
    return bool(mask >> (signal.SIGRTMIN + 2 - 1) & 1)


def dump(pid):
    return subprocess.run([str(DDPRUN), "dump", str(pid)], capture_output=True, text=True,
                          timeout=30)


def test_a_dump_request_to_a_ddprun_that_supervises_nothing_is_refused_and_kills_nothing():
    """Found by an attacking helper: `ddprun dump` sent its signal to any process named ddprun,
    said it had asked, and a doctor (no handler: the signal's default) died of it."""
    doctor = subprocess.Popen([str(DDPRUN), "doctor"], env=base_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Held once in ddprun's main, whatever it checks then.
        wait_for(lambda: dump_signal_in(doctor.pid, "SigIgn"), timeout=10, interval=0.001,
                 what="ddprun doctor to start")
        doctor.send_signal(signal.SIGSTOP)
        d = dump(doctor.pid)
        doctor.send_signal(signal.SIGCONT)
        out, _ = doctor.communicate(timeout=60)
    finally:
        doctor.kill()
    assert d.returncode == 1, (d.returncode, d.stdout, d.stderr)
    assert f"ddprun dump: ddprun {doctor.pid} supervises no job that it could dump" in d.stderr
    assert doctor.returncode in (0, 1), (doctor.returncode, out)  # its verdict, not a signal's
    assert "ok, " in out, out


def test_a_dump_request_to_an_exited_ddprun_is_refused():
    exited = subprocess.Popen([str(DDPRUN), "--version"], stdout=subprocess.DEVNULL)
    try:
        def zombie():
            with open(f"/proc/{exited.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        wait_for(zombie, timeout=10, what="ddprun --version to exit")
        d = dump(exited.pid)
    finally:
        exited.wait()
    assert d.returncode == 1, (d.returncode, d.stdout, d.stderr)
    assert "is not a running ddprun (it has exited" in d.stderr, d.stderr


def test_a_dump_requested_during_the_rendezvous_is_answered_not_dropped(tmp_path):
    port = free_port()
    agent = subprocess.Popen([str(DDPRUN), "--rdzv_backend=c10d",
                              f"--rdzv_endpoint=127.0.0.1:{port}", "--nnodes=2",
                              f"--log_dir={tmp_path}", "/bin/true"], env=base_env(),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: dump_signal_in(agent.pid, "SigCgt"), timeout=20, what="the agent's handler")
        d = dump(agent.pid)
        time.sleep(1)
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    finally:
        agent.kill()
    assert d.returncode == 0, d.stderr
    assert "dump requested (ddprun dump), but no workers run now" in err, err
