"""ddprun's machine-readable reports against their JSON Schemas (docs/schemas/): incident.json
after a failed or stopped run, the event log (--event_log_handler json|console,
DDPRUN_EVENT_LOG), and `ddprun doctor --json`; each with real jobs (a worker that fails, a hang,
a restart, ddprun stopped by SIGTERM, in a Slurm job or not)."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DDPRUN, SOURCE, base_env, free_port, run_ddprun, sh
from test_multinode import wait_listening
from trainlib import TRAIN

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = SOURCE / "docs" / "schemas"
STEPS = ["--width", "32", "--depth", "2", "--batch", "8", "--steps", "100000"]
# Rank 1 writes an error file as torch's @record does, then exits 3; rank 0 waits to be stopped.
FAILING = ["--no_python", "/bin/sh", "-c",
           'sleep 0.3; if [ "$LOCAL_RANK" = 1 ]; then '
           'printf \'{"message": {"message": "ValueError: bad batch", "extraInfo": '
           '{"py_callstack": "Traceback ...", "timestamp": "1"}}}\' > "$TORCHELASTIC_ERROR_FILE"; '
           'echo boom >&2; exit 3; fi; sleep 30']


def validator(name):
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def incident(log_dir):
    found = list(Path(log_dir).glob("*/incident.json"))
    assert len(found) == 1, found
    doc = json.loads(found[0].read_text())
    validator("incident").validate(doc)
    return doc


def events(path):
    lines = Path(path).read_text().splitlines()
    check = validator("event")
    docs = [json.loads(line) for line in lines]
    for d in docs:
        check.validate(d)
    return docs


def names(docs):
    return [d["event"] for d in docs]


def test_a_failed_worker_gives_an_incident_and_events(tmp_path):
    log = tmp_path / "events.jsonl"
    r = run_ddprun(["--nproc_per_node=2", "--event_log_handler=json", f"--log_dir={tmp_path}",
                    *FAILING], env=base_env(DDPRUN_EVENT_LOG=str(log)))
    assert r.rc == 3, r
    doc = incident(tmp_path)
    assert doc["class"] == "worker_failure" and doc["exit_code"] == 3
    root = doc["root_cause"]
    assert (root["rank"], root["class"], root["on_this_node"]) == (1, "worker", True)
    assert root["failure"]["error_file_contents"]["message"]["message"] == "ValueError: bad batch"
    assert root["failure"]["output_tail"] == "boom\n"
    states = {w["rank"]: (w["state"], w["exit_code"], w["signal"]) for w in doc["workers"]}
    assert states == {0: ("stopped", None, "SIGTERM"), 1: ("failed", 3, None)}, states
    assert doc["hang"] is None and doc["slurm"] is None and doc["signal"] is None
    assert f"incident report (JSON): {tmp_path}" in r.stderr
    evs = events(log)
    assert names(evs) == ["agent_started", "rendezvous_complete", "workers_started", "failure",
                          "exit"], names(evs)
    assert [w["rank"] for w in evs[2]["workers"]] == [0, 1]
    assert evs[-1]["exit_code"] == 3 and evs[-1]["incident"].endswith("/incident.json")
    assert all(e["run_id"] == doc["run_id"] for e in evs)


@pytest.mark.parametrize("path", ["/dev/stderr", "job.log"])
def test_events_into_the_file_stderr_goes_to_are_not_written_over(tmp_path, path):
    # Attack 78: DDPRUN_EVENT_LOG=/dev/stderr with 2>job.log opened the file anew: the events
    # went at that open's offset and ddprun's own log lines, at fd 2's, wrote over them.
    job_log = tmp_path / "job.log"
    with open(job_log, "w") as err:
        r = subprocess.run([str(DDPRUN), "--nproc_per_node=2", "--event_log_handler=json",
                            f"--log_dir={tmp_path / 'logs'}", *FAILING],
                           env=base_env(DDPRUN_EVENT_LOG=path), cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=err, timeout=60)
    assert r.returncode == 3
    text = job_log.read_text(errors="replace")
    docs = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    for d in docs:
        validator("event").validate(d)
    assert names(docs) == ["agent_started", "rendezvous_complete", "workers_started", "failure",
                           "exit"], text
    assert "worker group failed" in text  # ddprun's own lines are there too


def test_a_success_writes_no_incident_and_console_events_go_to_stderr(tmp_path):
    r = run_ddprun(["--nproc_per_node=2", "--event_log_handler=console", f"--log_dir={tmp_path}",
                    "--no_python", "/bin/true"])
    assert r.rc == 0, r
    assert not list(Path(tmp_path).glob("*/incident.json"))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith('{"schema":"ddprun.event/1"')]
    check = validator("event")
    for line in lines:
        check.validate(json.loads(line))
    evs = [json.loads(line) for line in lines]
    assert names(evs)[-1] == "exit" and evs[-1]["class"] == "succeeded", lines
    assert evs[-1]["incident"] is None


def test_a_restart_and_a_hang_are_events_and_the_hang_is_in_the_incident(tmp_path):
    log = tmp_path / "events.jsonl"
    r = run_ddprun(["--nproc_per_node=2", "--hang_timeout=2", "--shutdown_timeout=1",
                    "--max_restarts=1", f"--log_dir={tmp_path}", TRAIN, "--device", "cpu", *STEPS,
                    "--hang-at-step", "3", "--hang-rank", "1"],
                   env=base_env(DDPRUN_EVENT_LOG=str(log)), timeout=120)
    assert r.rc == 124, r
    evs = events(log)
    seq = names(evs)
    assert seq.count("hang_detected") == 2 and seq.count("dump_written") == 2, seq
    assert seq.count("restart") == 1 and seq.count("rendezvous_complete") == 2, seq
    assert seq[-1] == "exit" and evs[-1]["class"] == "hang"
    hang = next(e for e in evs if e["event"] == "hang_detected")
    assert 1 in [h["rank"] for h in hang["hung"]], hang
    doc = incident(tmp_path)
    assert doc["class"] == "hang" and doc["attempt"] == 1 and doc["max_restarts"] == 1
    assert doc["hang"]["stragglers"] == [1], doc["hang"]
    assert Path(doc["hang"]["summary"]).is_file() and "attempt_1" in doc["hang"]["dump_dir"]
    assert doc["root_cause"]["class"] == "hang"


def test_a_hang_at_exit_is_an_event_and_an_incident_of_its_own_class(tmp_path):
    log = tmp_path / "events.jsonl"
    r = run_ddprun(["--nproc_per_node=2", "--hang_timeout=5", "--exit_timeout=2",
                    "--shutdown_timeout=1", "--max_restarts=1", f"--log_dir={tmp_path}", TRAIN,
                    "--device", "cpu", "--width", "64", "--depth", "2", "--batch", "16",
                    "--steps", "10", "--hang-at-exit", "--hang-rank", "1"],
                   env=base_env(DDPRUN_EVENT_LOG=str(log)), timeout=120)
    assert r.rc == 124, r
    evs = events(log)
    seq = names(evs)
    assert "restart" not in seq and seq[-1] == "exit" and evs[-1]["class"] == "hang", seq
    hang = next(e for e in evs if e["event"] == "hang_detected")
    assert [(h["rank"], h["at_exit"]) for h in hang["hung"]] == [(1, True)], hang
    failure = next(e for e in evs if e["event"] == "failure")
    assert failure["class"] == "exit-hang", failure
    doc = incident(tmp_path)
    assert doc["class"] == "hang" and doc["attempt"] == 0
    assert doc["root_cause"]["class"] == "exit-hang" and doc["root_cause"]["rank"] == 1


@pytest.mark.parametrize("slurm_job, cls", [(None, "signalled"), ("4242", "preempted")])
@pytest.mark.parametrize("during", ["training", "rendezvous"])
def test_a_stopped_run_is_signalled_or_preempted_in_a_slurm_job(tmp_path, slurm_job, cls, during):
    """Stopped while its workers train, or while it waits for another node (scancel while a
    node is still starting: that run was a "launcher_error" with no signal; attack 84)."""
    log = tmp_path / "events.jsonl"
    env = base_env(DDPRUN_EVENT_LOG=str(log), SLURM_JOB_ID=slurm_job)
    port = free_port()
    nodes = ["--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1", f"--master_port={port}"]
    p = subprocess.Popen([str(DDPRUN), *(nodes if during == "rendezvous" else []),
                          "--nproc_per_node=2", "--shutdown_timeout=2",
                          f"--log_dir={tmp_path}", "--no_python", "/bin/sleep", "30"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    if during == "rendezvous":
        wait_listening(port)
    while during == "training" and time.monotonic() < deadline and "workers_started" not in (
            log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    doc = incident(tmp_path)
    assert (doc["class"], doc["signal"], doc["exit_code"]) == (cls, "SIGTERM", 143), doc
    assert doc["root_cause"] is None
    evs = events(log)
    assert "signal" in names(evs) and evs[-1]["class"] == cls


def test_an_event_log_that_cannot_be_opened_is_a_usage_error(tmp_path):
    r = run_ddprun(["--nproc_per_node=1", "--no_python", "/bin/true"],
                   env=base_env(DDPRUN_EVENT_LOG=str(tmp_path / "no" / "such" / "dir" / "x")))
    assert r.rc == 2, r
    assert "DDPRUN_EVENT_LOG=" in r.stderr and "cannot open it for writing" in r.stderr, r
    r = run_ddprun(["--event_log_handler=syslog", "--no_python", "/bin/true"])
    assert r.rc == 2, r
    assert "--event_log_handler=syslog: null, json, console or dynamic_rendezvous" in r.stderr, r
    # torchrun's third handler, a null one there (attack 99: refused here, run by torchrun).
    r = run_ddprun(["--event_log_handler=dynamic_rendezvous", "--no_python", "/bin/true"])
    assert r.rc == 0 and '"name"' not in r.stderr, r


def test_named_pipes_that_nobody_reads_never_stop_ddprun(tmp_path):
    """An event log or the launcher's own error file that is a named pipe without a reader:
    ddprun said nothing and waited in open() for ever, deaf to SIGTERM at exit."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = run_ddprun(["--nproc_per_node=1", "--no_python", "/bin/true"],
                   env=base_env(DDPRUN_EVENT_LOG=str(fifo)), timeout=20)
    assert r.rc == 2 and f"{fifo} is a named pipe that nobody reads" in r.stderr, r
    r = run_ddprun(["--nproc_per_node=1", "--no_python", "/bin/false"],
                   env=base_env(TORCHELASTIC_ERROR_FILE=str(fifo)), timeout=20)
    assert r.rc == 1, r
    assert (f"the root cause is not written to ddprun's own TORCHELASTIC_ERROR_FILE: {fifo} is a "
            "named pipe that nobody reads") in r.stderr, r


def test_a_usage_error_found_by_the_agent_is_an_incident(tmp_path):
    log = tmp_path / "events.jsonl"
    r = run_ddprun([f"--log_dir={tmp_path}", "--no_python", "/bin/true"],
                   env=base_env(DDPRUN_CGROUP="7", DDPRUN_EVENT_LOG=str(log)))
    assert r.rc == 2, r
    doc = incident(tmp_path)
    assert doc["class"] == "usage_error" and "DDPRUN_CGROUP=7" in doc["message"], doc
    assert doc["workers"] == [] and doc["root_cause"] is None
    assert names(events(log)) == ["agent_started", "exit"]


@pytest.mark.parametrize("how", [["doctor", "--json"], ["--doctor", "--json"],
                                 ["doctor", "--json", "--json"]],
                         ids=["subcommand", "option", "repeated"])
def test_doctor_json_matches_its_schema_and_exit_code(how):
    # `ddprun --doctor --json` said "unknown option --json" (found by an attacking helper).
    r = subprocess.run([str(DDPRUN), *how, "--nproc_per_node=2"], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    validator("doctor").validate(doc)
    assert doc["nproc_per_node"] == 2
    assert doc["failed"] == (r.returncode == 1)
    assert doc["failed"] == any(c["status"] == "fail" for c in doc["checks"])
    assert any(c["check"].startswith("RLIMIT_NPROC") for c in doc["checks"])


@pytest.mark.parametrize("bad", [["--nproc_per_node=abc"], ["--bogus"], ["--json=yes"],
                                 ["--nnodes=3", "--node_rank=7"]],
                         ids=["value", "unknown", "json-value", "node-rank"])
def test_doctor_json_refusing_its_options_still_prints_a_document(bad):
    """`doctor --json` given a bad option printed the refusal on stderr only: a script that
    parses stdout got nothing to parse. It gets a document of the same schema with the reason."""
    r = subprocess.run([str(DDPRUN), "doctor", "--json", *bad], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r
    doc = json.loads(r.stdout)
    validator("doctor").validate(doc)
    assert doc["failed"] is True and doc["checks"] == [], doc
    assert doc["usage_error"] and doc["usage_error"] in r.stderr, (doc, r.stderr)
    assert bad[-1].split("=")[0] in doc["usage_error"], doc


@pytest.mark.parametrize("where", ["log_dir", "env", "usage_error"])
def test_doctor_json_stays_valid_with_bytes_that_are_not_utf8(tmp_path, where):
    """A --log_dir, OMP_NUM_THREADS or refused option holding a byte that is not UTF-8 crashed
    `doctor --json` ("internal error: [json.exception.type_error.316]", nothing on stdout)."""
    args, env = [os.fsencode(DDPRUN), b"doctor", b"--json"], base_env()
    if where == "log_dir":
        args.append(b"--log_dir=" + os.fsencode(tmp_path) + b"/x\xff")
    elif where == "env":
        env = {**env, "OMP_NUM_THREADS": os.fsdecode(b"\xff")}
    else:
        args.append(b"--role=\xff\xfe bad")
    r = subprocess.run(args, env=env, capture_output=True, timeout=60)
    assert "internal error" not in r.stderr.decode(errors="replace"), r
    assert r.returncode == (2 if where == "usage_error" else 0) or \
        (where != "usage_error" and r.returncode == 1), r
    validator("doctor").validate(json.loads(r.stdout))


def test_doctor_without_json_refuses_in_text_only():
    r = subprocess.run([str(DDPRUN), "doctor", "--bogus"], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and "--bogus" in r.stderr, r


def test_schemas_are_documented():
    text = (SOURCE / "docs" / "machine-reports.md").read_text()
    for name in ("event", "incident", "doctor"):
        assert f"schemas/{name}.schema.json" in text
    assert os.path.getsize(SCHEMAS / "incident.schema.json") > 0


def test_a_signal_while_a_failed_group_stops_keeps_the_root_cause_in_the_incident(tmp_path):
    """Rank 1 exits 5 with a restart left; rank 0 takes its time to stop; ddprun is then
    signalled. The console named the root cause, the incident said "root_cause": null (attack
    87): the record held none, the job ending by the signal. It is this node's now."""
    script = ('if [ "$LOCAL_RANK" = 1 ]; then sleep 0.5; exit 5; fi; '
              "trap 'sleep 2; exit 0' TERM; while true; do sleep 0.1; done")
    p = subprocess.Popen([str(DDPRUN), "--nproc_per_node=2", "--max_restarts=3",
                          f"--log_dir={tmp_path}", *sh(script)], env=base_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)  # rank 1 exited at 0.5 s; rank 0 stops until 2.5 s
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    assert "restart 1 of 3" not in err, err
    doc = incident(tmp_path)
    assert (doc["class"], doc["signal"]) == ("signalled", "SIGTERM"), doc
    root = doc["root_cause"]
    assert root is not None, doc
    assert (root["class"], root["rank"], root["exit_code"], root["on_this_node"]) == \
        ("worker", 1, 5, True), root


@pytest.mark.parametrize("where", ["stderr", "fifo"])
def test_an_event_log_reader_that_stops_reading_never_stops_ddprun(tmp_path, where):
    """Found by an attacking helper (attack 108): events to a stderr pipe nobody read, or to a
    named pipe whose reader stopped, blocked the agent in write(2) once the pipe was full (about
    60 restarts): no more restarts, SIGTERM unheard. 300 quick failures must run their course."""
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    runs = tmp_path / "runs"
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held open, read only at the end
    env = base_env(**({"DDPRUN_EVENT_LOG": str(fifo)} if where == "fifo" else {}))
    cmd = [DDPRUN, "--event_log_handler=json", "--max_restarts=300", "--log_dir=/dev/null",
           "--no_python", "/bin/sh", "-c", f"echo run >> {runs}; exit 1"]
    stderr = os.open(fifo, os.O_WRONLY) if where == "stderr" else subprocess.DEVNULL
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        if where == "stderr":
            os.close(stderr)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
                not runs.exists() or len(runs.read_text().splitlines()) < 301):
            time.sleep(0.2)
        assert runs.exists() and len(runs.read_text().splitlines()) == 301, \
            "ddprun stopped restarting: blocked writing its event log to a pipe nobody read"
        if where == "stderr":
            # At its end ddprun waits for its own stderr (its lines are kept nowhere else), as
            # any program writing to a pipe: SIGTERM gives them up.
            time.sleep(1)
            p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 1 if where == "fifo" else p.wait(timeout=10) is not None
        data = b""
        while chunk := os.read(reader, 1 << 16):
            data += chunk
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(reader)
    lines = data.decode(errors="replace").splitlines()
    assert len(lines) > 20, lines
    if where == "fifo":  # whole lines only: every one is an event of the schema
        check = validator("event")
        for line in lines:
            check.validate(json.loads(line))


def test_events_to_a_stderr_that_is_a_socket_go_with_ddprun_s_lines(tmp_path):
    """Attack 110: DDPRUN_EVENT_LOG=/dev/stderr on a socket (a journal, a supervisor's
    socketpair) was refused as "a named pipe that nobody reads" (a socket cannot be opened by
    its path); it is ddprun's own stderr, written through its console."""
    import socket
    a, b = socket.socketpair()
    p = subprocess.Popen([DDPRUN, "--nproc_per_node=1", "--no_python", "/bin/true"],
                         env=base_env(DDPRUN_EVENT_LOG="/dev/stderr"), stdout=subprocess.DEVNULL,
                         stderr=b.fileno())
    b.close()
    data = b""
    a.settimeout(60)
    while chunk := a.recv(65536):
        data += chunk
    a.close()
    assert p.wait(timeout=60) == 0, data
    lines = [json.loads(ln) for ln in data.decode().splitlines() if ln.startswith("{")]
    assert names(lines)[0] == "agent_started" and names(lines)[-1] == "exit", data
