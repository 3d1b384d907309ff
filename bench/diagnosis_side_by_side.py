#!/usr/bin/env python3
"""The diagnosis reproductions under ddprun and torchrun, side by side: what each launcher tells
the user about the classic DDP failures, and after how long.

Each script of tests/e2e/programs/diagnosis (Gloo on CPU, 2 ranks) runs once under
  ddprun   --nproc_per_node=2 SCRIPT
  torchrun --standalone --nproc_per_node=2 --max-restarts=0 SCRIPT
with GLOO_SOCKET_IFNAME=lo and OMP_NUM_THREADS=1. Per launcher the table gives the exit code, the
wall time to exit, and what it said: for ddprun the report's "cause" line (supervisor/explain.cpp),
for torchrun the first line of the workers' output that carries the failure (an exception or
error line) and whether its report's traceback field names anything. A row is wrong when a launcher
exits 0, or when ddprun gives no cause line for a script that has a catalogue entry.

Not run here: threads.py needs an unprivileged user with a low RLIMIT_NPROC (test_diagnosis runs
it under ddprun), the GPU scripts need a GPU (scripts/gpu-check.sh).
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import time

import benchlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = os.path.join(REPO, "tests", "e2e", "programs", "diagnosis")
SCRIPTS = ["unused_parameter.py", "inplace_buffer.py", "port_in_use.py", "no_init.py",
           "bus_error.py", "nan_loss.py", "gloo_interface.py", "model_mismatch.py",
           "nccl_without_gpu.py", "group_again.py", "native_crash.py", "finishes_early.py",
           "late_rank.py", "late_collective.py"]
# Each script's environment beyond the common one.
SCRIPT_ENV = {"gloo_interface.py": {"GLOO_SOCKET_IFNAME": "lo,ddp-nosuch0"},
              "native_crash.py": {"PYTHONFAULTHANDLER": "1"}}
EXCEPTION = re.compile(r"^[\w.]*(Error|Exception): ")
FAILURE = re.compile(r"(Error|error:|Exception|nan|killed by signal)")


def run(argv, env, timeout):
    start = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, errors="replace",
                           timeout=timeout, start_new_session=True)
        return p.returncode, time.monotonic() - start, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        return None, time.monotonic() - start, out


def ddprun_said(out):
    cause = [ln[14:] for ln in out.splitlines() if ln.startswith("  cause     : ")]
    return cause[0] if cause else "(no cause line)"


def torchrun_said(out):
    """The first exception line (`Name: message`) of the workers' output, else the first line
    that reads as a failure."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln).strip() for ln in out.splitlines()]
    for pattern in (EXCEPTION, FAILURE):
        for text in lines:
            if pattern.search(text) and not text.startswith(("File ", "Traceback", "raise ")):
                return text
    return "(no failure line)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    benchlib.add_launcher_args(ap, REPO)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--width", type=int, default=110, help="characters of each message shown")
    args = ap.parse_args()
    benchlib.require_executables([args.ddprun, args.python, args.torchrun])
    t0 = time.time()
    base = benchlib.launcher_env(
        prefixes=("PET_", "TORCHELASTIC_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK",
                  "LOCAL_WORLD_SIZE", "SLURM_"),
        OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHON_EXEC=args.python,
        CUDA_VISIBLE_DEVICES="")
    print("# Diagnosis side by side: ddprun vs torchrun on the classic DDP failures")
    print(benchlib.date_line())
    print(benchlib.host_line(benchlib.cpu_model("?"), os.getloadavg()[0]))
    print("#  ddprun: %s (%s); torchrun: %s (torch %s)" % (
        args.ddprun, benchlib.ddprun_version(args.ddprun), args.torchrun,
        benchlib.torch_version(args.torchrun)))
    print("#  each: --nproc_per_node=2, Gloo, GLOO_SOCKET_IFNAME=lo; torchrun --standalone "
          "--max-restarts=0")
    print("#")
    wrong = []
    for script in SCRIPTS:
        path = os.path.join(PROGRAMS, script)
        held = None
        env = dict(base, **SCRIPT_ENV.get(script, {}))
        if script == "port_in_use.py":
            held = socket.socket()
            held.bind(("127.0.0.1", 0))
            held.listen()
            env["HELD_PORT"] = str(held.getsockname()[1])
        try:
            d_rc, d_s, d_out = run([args.ddprun, "--nproc_per_node=2", path], env, args.timeout)
            t_rc, t_s, t_out = run([args.torchrun, "--standalone", "--nproc_per_node=2",
                                    "--max-restarts=0", path], env, args.timeout)
        finally:
            if held is not None:
                held.close()
        d_said, t_said = ddprun_said(d_out), torchrun_said(t_out)
        t_traceback = re.search(r"traceback : (.*)", t_out)
        print("%s" % script)
        print("   ddprun    exit %-4s %5.1f s  cause: %s" % (d_rc, d_s, d_said[:args.width]))
        print("   torchrun  exit %-4s %5.1f s  said:  %s" % (t_rc, t_s, t_said[:args.width]))
        print("   torchrun  report traceback: %s" % (
            t_traceback.group(1)[:args.width] if t_traceback else "(no report)"))
        for name, rc in (("ddprun", d_rc), ("torchrun", t_rc)):
            if rc == 0 or rc is None:
                wrong.append("%s under %s: exit %s" % (script, name, rc))
        if d_said == "(no cause line)":
            wrong.append("%s under ddprun: no cause line" % script)
        sys.stdout.flush()
    print("#")
    print("#  not run here: threads.py (needs an unprivileged user with a low RLIMIT_NPROC) and "
          "out_of_memory.py (a memory cgroup with a limit), both in tests/e2e/test_diagnosis.py; "
          "the gpu_*.py scripts (scripts/gpu-check.sh)")
    return benchlib.print_footer(len(SCRIPTS) - len({w.split(" ")[0] for w in wrong}),
                                 len(SCRIPTS), wrong, before=[benchlib.elapsed_line(t0, load=True)],
                                 label="WRONG")


if __name__ == "__main__":
    sys.exit(main())
