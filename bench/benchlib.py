"""Helpers shared by the benchmark scripts in bench/ (launcher_bench.py,
rendezvous_bench.py, hang_bench.py, pytorch_hang_bench.py, ddp_bench.py,
store_bench.py).

The scripts run as `python bench/X.py`, so bench/ is on sys.path and they
import this module as `benchlib`.  Nothing here prints on its own except the
report helpers (header and footer lines in the nccl-tests style the scripts
share).
"""

import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid


# --- tools and binaries ------------------------------------------------------

def require_executables(paths):
    """Exit with 'not executable: PATH' at the first path that is not executable."""
    for p in paths:
        if not os.access(p, os.X_OK):
            sys.exit("not executable: %s" % p)


def find_cc():
    """The C compiler for the worker program, or exit."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("a C compiler (cc) is needed for the worker program")
    return cc


def compile_worker(cc, source, root, name="worker"):
    """Writes source to ROOT/NAME.c, compiles it with -O2; returns the binary's path."""
    worker = os.path.join(root, name)
    with open(worker + ".c", "w") as f:
        f.write(source)
    subprocess.run([cc, "-O2", "-o", worker, worker + ".c"], check=True)
    return worker


def snapshot(src, root, name):
    """Copies src to ROOT/NAME (so a concurrent rebuild cannot change it mid-run)."""
    dst = os.path.join(root, name)
    shutil.copy2(src, dst)
    return dst


def ddprun_version(ddprun):
    return subprocess.run([ddprun, "--version"], capture_output=True, text=True).stdout.strip()


def torch_version(torchrun):
    """torch.__version__ from the python next to torchrun, or 'unknown'."""
    tpy = os.path.join(os.path.dirname(os.path.abspath(torchrun)), "python")
    return subprocess.run([tpy, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True).stdout.strip() or "unknown"


def cpu_model(default="unknown"):
    """The first 'model name' of /proc/cpuinfo, or default."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


def add_launcher_args(ap, repo):
    """--ddprun (repo's build), --python and --torchrun (the test venv's) for a bench that runs
    PyTorch programs under both launchers."""
    venv = os.path.expanduser("~/.cache/ddprun/venv/bin")
    ap.add_argument("--ddprun", default=os.path.join(repo, "build", "ddprun"))
    ap.add_argument("--python", default=os.path.join(venv, "python"))
    ap.add_argument("--torchrun", default=os.path.join(venv, "torchrun"))


# --- environment and tagged processes ----------------------------------------

def launcher_env(prefixes=("PET_", "TORCHELASTIC_"), keys=(), **overrides):
    """os.environ without the variables whose names start with one of prefixes
    or are in keys, with overrides set."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith(tuple(prefixes)) or k in keys)}
    env.update(overrides)
    return env


def tagged_env(base_env, tag):
    """A copy of base_env with TAG=<fresh unique value>; returns (env, value)."""
    tagval = uuid.uuid4().hex
    env = dict(base_env)
    env[tag] = tagval
    return env, tagval


def kill_tagged(tag, tagval, pgids=(), tries=50):
    """SIGKILLs the process groups pgids, then, up to tries rounds 50 ms apart,
    every process whose environment holds TAG=tagval, until none is left."""
    for pid in pgids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    needle = ("%s=%s" % (tag, tagval)).encode()
    for _ in range(tries):
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % d, "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(d))
            except OSError:
                pass
        if not found:
            return
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


class Timed:
    """A child in its own session, tagged with `tag` in its environment, whose stdout and
    stderr lines are stamped with time.time() on arrival; wait() kills what is left of it."""

    def __init__(self, argv, env, tag):
        env, self.tagval = tagged_env(env, tag)
        self.tag = tag
        self.lines = []  # (time, stream, text)
        self.lock = threading.Lock()
        self.t_start = time.time()
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True)
        self.readers = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                        for s, n in ((self.p.stdout, "out"), (self.p.stderr, "err"))]
        for r in self.readers:
            r.start()

    def _read(self, stream, name):
        for raw in iter(stream.readline, b""):
            t = time.time()
            with self.lock:
                self.lines.append((t, name, raw.decode(errors="replace").rstrip("\n")))

    def wait(self, timeout):
        """Wait for exit; return (exit code or None on timeout, exit time)."""
        try:
            os_rc = None
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                r = os.waitid(os.P_PID, self.p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if r is not None:
                    t = time.time()
                    os_rc = self.p.wait()
                    return os_rc, t
                time.sleep(0.005)
            return None, time.time()
        finally:
            kill_tagged(self.tag, self.tagval, [self.p.pid])
            for r in self.readers:
                r.join(timeout=5)

    def first(self, pattern):
        rx = re.compile(pattern)
        with self.lock:
            for t, _, text in self.lines:
                if rx.search(text):
                    return t, text
        return None, None

    def text(self):
        with self.lock:
            return "\n".join(text for _, _, text in self.lines)


def watch_window(c, t_from, window):
    """Watches the Timed child `c` from time.time() `t_from` for `window` seconds (the reference
    launcher after a hang), then kills what is left of it. Returns (exited, watched seconds,
    its exit code or None, the lines it printed after t_from)."""
    exited = False
    while time.time() < t_from + window:
        if c.p.poll() is not None:
            exited = True
            break
        time.sleep(0.05)
    watched = time.time() - t_from
    rc, _ = c.wait(0.01)  # kills it and its workers when still running
    with c.lock:
        after = [text for t, _, text in c.lines if t > t_from]
    return exited, watched, rc if exited else None, after


# --- statistics --------------------------------------------------------------

def median_or_none(v):
    return statistics.median(v) if v else None


def med_min_max(v):
    """(median, min, max) of a non-empty list."""
    return statistics.median(v), min(v), max(v)


# --- report lines ------------------------------------------------------------

def date_line():
    return "#  date: %s" % time.strftime("%Y-%m-%d %H:%M:%S %Z")


def host_line(model, load=None):
    s = "#  host: %s, %d CPUs (%s), kernel %s" % (platform.node(), os.cpu_count(), model,
                                                  platform.release())
    if load is not None:
        s += ", load average at start %.2f" % load
    return s


def print_launcher_header(title, ddprun_src, ddprun_ver, torchrun, torch_ver, model):
    """The first lines of a ddprun vs torchrun report."""
    print("# " + title)
    print(date_line())
    print(host_line(model))
    print("#  ddprun: %s (%s)" % (ddprun_src, ddprun_ver))
    print("#  torchrun: %s (torch %s)" % (torchrun, torch_ver))


def elapsed_line(t0, load=False):
    s = "#  elapsed %.0f s" % (time.time() - t0)
    if load:
        s += ", load average at end %.2f" % os.getloadavg()[0]
    return s


def print_footer(met, total, problems, before=(), label="WRONG RESULT"):
    """Prints '#  LABEL: p' for every problem, the lines in before, and the
    'goals met' line ending in OK or FAILED; returns the exit status (0 on OK)."""
    for p in problems:
        print("#  %s: %s" % (label, p))
    for line in before:
        print(line)
    ok = met == total and not problems
    print("#  goals met: %d/%d, wrong results: %d   %s" % (
        met, total, len(problems), "OK" if ok else "FAILED"))
    return 0 if ok else 1
