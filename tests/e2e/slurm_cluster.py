"""A real Slurm cluster on loopback for the tests and benchmarks (no extra Python packages).

SlurmCluster brings up, in a short temp dir under /tmp (everything it writes lives there;
nothing goes to /etc):
  - munged with its own key and socket,
  - slurmctld on 127.0.0.1,
  - N slurmd, one per simulated node, named 127.0.0.2, 127.0.0.3, ... with NodeAddr the
    same (so every name in SLURM_JOB_NODELIST resolves and each node has its own address),
    each on its own port.
Ports are chosen below the ephemeral range and checked with a real bind (a port held by an
outgoing connection looks free to a connect probe, and slurmd then fails to bind it).

    with SlurmCluster(nodes=2) as c:
        r = c.srun(["-N2", "hostname"], timeout=10)
        job = c.sbatch(["--wrap", "sleep 1"])

`env` is this process's environment with SLURM_CONF pointing at the cluster and every other
SLURM_* removed (a test suite run inside a Slurm job would otherwise submit into that job).
stop() cancels every job, kills the daemons by pid file (after checking /proc/<pid>/comm
against the expected name), then any slurmstepd with a file open under the dir and any task
whose environment names this cluster's SLURM_CONF. It never kills by name alone.
See /work/shared/reference/slurm.md for the recipe and its pitfalls.

Requirements: root (SlurmUser=root), and the commands in TOOLS on PATH (scripts/setup.sh
installs them); missing() says what is absent, so tests can skip with a reason.
"""

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

TOOLS = ("mungekey", "munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "squeue",
         "scontrol", "sinfo")


def missing():
    """None when a cluster can be brought up here, else why not (one line)."""
    absent = [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if absent:
        return f"Slurm is not installed (no {', '.join(absent)}); scripts/setup.sh installs it"
    if os.geteuid() != 0:
        return "the local Slurm cluster runs its daemons as root (SlurmUser=root); not root"
    return None


def tool(name):
    return shutil.which(name) or str(Path("/usr/sbin", name))


def alive(pid):
    """True if pid exists and is not a zombie (PID 1 may reap orphaned daemons late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def comm(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def environ_of(pid):
    """The environment of pid as a dict ({} if unreadable or gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0")
                if "=" in item)


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def free_ports(count, host="127.0.0.1"):
    """count consecutive ports below the ephemeral range that a real bind accepts on host
    and on 0.0.0.0, starting at a random place (several clusters may run at once)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        first = random.randrange(10000, low - count)
        if all(bindable(p, host) for p in range(first, first + count)):
            return list(range(first, first + count))
    raise RuntimeError(f"no {count} free consecutive ports below {low}")


def bindable(port, host):
    for addr in (host, "0.0.0.0"):
        with socket.socket() as s:
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


def node_name(i):
    """The name (and address) of node i: 127.0.0.2, 127.0.0.3, ..."""
    return f"127.0.0.{i + 2}"


class SlurmError(RuntimeError):
    pass


class SlurmCluster:
    """One local cluster; a context manager (start() on enter, stop() on exit)."""

    def __init__(self, nodes=2, cpus=2, kill_wait=5, min_job_age=300, extra_conf="",
                 start_timeout=30.0, names=None):
        """`names`: node names that need not resolve (NodeName=NAME NodeAddr=127.0.0.K), as on
        clusters whose node names are Slurm's own; by default each node is named by its
        address."""
        self.addrs = [node_name(i) for i in range(nodes)]
        self.nodes = list(names) if names else list(self.addrs)
        assert len(self.nodes) == nodes
        self.cpus = cpus
        self.kill_wait = kill_wait
        self.min_job_age = min_job_age
        self.extra_conf = extra_conf
        self.start_timeout = start_timeout
        self.dir = None
        self.conf = None
        self.env = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        # Unix socket paths (munge socket, <spool>/<node>_<job>.<step>) must fit in 108 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="slurm.", dir="/tmp"))
        assert len(str(self.dir)) < 60, self.dir
        self.dir.chmod(0o755)  # munged: "execute permissions for all required"
        for sub in ("munge", "etc", "log", "state", "spool", "run", "jobs"):
            (self.dir / sub).mkdir(mode=0o755)
        (self.dir / "munge").chmod(0o755)
        self.conf = self.dir / "etc" / "slurm.conf"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = str(self.conf)
        try:
            self._start_munge()
            ports = free_ports(1 + len(self.nodes))
            self.conf.write_text(self._config(ports[0], ports[1:]))
            self._daemon([tool("slurmctld"), "-f", str(self.conf)], "slurmctld")
            for node in self.nodes:
                self._daemon([tool("slurmd"), "-f", str(self.conf), "-N", node], f"slurmd {node}")
            self._wait_idle()
        except BaseException:
            self.stop(remove=False)
            raise

    def _start_munge(self):
        m = self.dir / "munge"
        self._daemon([tool("mungekey"), "-c", "-k", str(m / "munge.key")], "mungekey")
        self._daemon([tool("munged"), "-f", f"--key-file={m}/munge.key",
                      f"--socket={m}/munge.sock", f"--pid-file={m}/munged.pid",
                      f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"], "munged")

    def _daemon(self, argv, what):
        """Runs a command that daemonizes (so it holds none of our pipes); fails on rc != 0."""
        r = subprocess.run(argv, env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=20)
        if r.returncode != 0:
            raise SlurmError(f"{what}: {' '.join(argv)} exited {r.returncode}: "
                             f"{r.stdout}{r.stderr}\n{self.log_tails()}")

    def _config(self, ctld_port, node_ports):
        d = self.dir
        lines = [
            "ClusterName=ddptest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={node_ports[0]}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={d}/munge/munge.sock",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/run/slurmctld.pid",
            f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            # More CPUs than cores: without this the nodes go INVAL/DRAIN.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            f"KillWait={self.kill_wait}",
            f"MinJobAge={self.min_job_age}",
            "MpiDefault=none",
            "MailProg=/bin/true",
        ]
        for node, addr, port in zip(self.nodes, self.addrs, node_ports):
            lines.append(f"NodeName={node} NodeAddr={addr} NodeHostname=localhost Port={port} "
                         f"CPUs={self.cpus} RealMemory=1000 State=UNKNOWN")
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        if self.extra_conf:
            lines.append(self.extra_conf)  # a repeated key: the last value wins
        return "\n".join(lines) + "\n"

    def _wait_idle(self):
        deadline = time.monotonic() + self.start_timeout
        states = {}
        while time.monotonic() < deadline:
            r = self.run("sinfo", ["-h", "-N", "-o", "%N %t"], timeout=10, check=False)
            states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in self.nodes):
                return
            time.sleep(0.1)
        raise SlurmError(f"nodes not idle after {self.start_timeout}s: {states}\n"
                         f"{self.log_tails()}")

    def stop(self, remove=None):
        """Cancels every job and kills every process of this cluster. Removes the dir unless
        remove is False (None: keep it when DDPRUN_KEEP_SLURM is set)."""
        if self.dir is None:
            return
        if self.conf is not None and self.conf.exists() and self._pid("run/slurmctld.pid"):
            self._cancel_all()
        daemons = [(f"run/slurmd-{n}.pid", "slurmd") for n in self.nodes]
        daemons += [("run/slurmctld.pid", "slurmctld"), ("munge/munged.pid", "munged")]
        self._kill_pids([(self._pid(f), name) for f, name in daemons])
        # What is left is ours (matched by open files or environment); no grace for it.
        self._kill_pids([(pid, None) for pid in self.leftover_pids()], first=signal.SIGKILL)
        if remove is None:
            remove = not os.environ.get("DDPRUN_KEEP_SLURM")
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _cancel_all(self, timeout=5.0):
        """SIGKILLs every process of every job (no KillWait), cancels the jobs and waits a
        bounded time for the queue to drain, so the daemons stop with no step to clean up."""
        try:
            self.run("scancel", ["--full", "-s", "KILL", "-u", "root"], timeout=10, check=False)
            self.run("scancel", ["-u", "root"], timeout=10, check=False)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                r = self.run("squeue", ["-h", "-o", "%i"], timeout=10, check=False)
                if r.returncode != 0 or not r.stdout.strip():
                    return
                time.sleep(0.1)
        except subprocess.TimeoutExpired:
            pass

    def _pid(self, rel):
        try:
            return int((self.dir / rel).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def _kill_pids(pids_and_names, grace=3.0, first=signal.SIGTERM):
        """Sends first (SIGTERM), then SIGKILL after grace, to each pid whose comm is its
        name (None: no check; the caller matched it by its files or environment)."""
        mine = [pid for pid, name in pids_and_names
                if pid and alive(pid) and (name is None or comm(pid) == name)]
        for sig in dict.fromkeys((first, signal.SIGKILL)):
            for pid in mine:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while any(alive(p) for p in mine) and time.monotonic() < deadline:
                time.sleep(0.05)
            mine = [p for p in mine if alive(p)]
            if not mine:
                return

    def leftover_pids(self):
        """Processes of this cluster other than its daemons: slurmstepd with a file open under
        the dir, and tasks whose environment has this cluster's SLURM_CONF."""
        found = []
        for pid in all_pids():
            if pid == os.getpid():
                continue
            name = comm(pid)
            if name in ("slurmctld", "slurmd", "munged"):
                continue
            if name == "slurmstepd" and self._has_file_under_dir(pid):
                found.append(pid)
            elif self.is_task(pid):
                found.append(pid)
        return found

    def is_task(self, pid):
        """True if pid runs inside a job of this cluster (its environment says so)."""
        e = environ_of(pid)
        return e.get("SLURM_CONF") == str(self.conf) and "SLURMD_NODENAME" in e and alive(pid)

    def task_pids(self):
        return [pid for pid in all_pids() if pid != os.getpid() and self.is_task(pid)]

    def _has_file_under_dir(self, pid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(self.dir) + "/"):
                    return True
            except OSError:
                pass
        return False

    # ------------------------------------------------------------------ commands

    def run(self, command, args, timeout=30, check=True, env=None, **kw):
        """Runs a Slurm client command to completion; returns CompletedProcess (text).
        check: raise SlurmError (with the daemon logs) on a non-zero exit."""
        kw.setdefault("cwd", self.dir / "jobs")  # the jobs' working dir: not the source tree
        r = subprocess.run([tool(command), *map(str, args)], env=env or self.env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           errors="replace", timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise SlurmError(f"{command} {args} exited {r.returncode}\n--- stdout\n{r.stdout}"
                             f"\n--- stderr\n{r.stderr}\n{self.log_tails()}")
        return r

    def srun(self, args, timeout, env=None, **kw):
        """srun ARGS to completion (no check: tests look at the exit code)."""
        return self.run("srun", args, timeout=timeout, check=False, env=env, **kw)

    def srun_background(self, args, out_path, env=None):
        """Starts srun ARGS with stdout and stderr into out_path; returns the Popen."""
        with open(out_path, "wb") as out:
            return subprocess.Popen([tool("srun"), *map(str, args)], env=env or self.env,
                                    cwd=self.dir / "jobs", stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def sbatch(self, args, env=None):
        """Submits a batch job; returns its id."""
        r = self.run("sbatch", ["--parsable", *args], timeout=20, env=env)
        return int(r.stdout.strip().split(";")[0])

    def scancel(self, args):
        return self.run("scancel", args, timeout=20)

    def scontrol(self, args, check=True):
        return self.run("scontrol", args, timeout=20, check=check)

    def squeue(self, args=()):
        return self.run("squeue", args, timeout=20).stdout

    def job(self, job_id):
        """scontrol show job as a dict (Key=Value pairs), {} once the job is forgotten."""
        r = self.scontrol(["show", "job", "-o", str(job_id)], check=False)
        if r.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait_job(self, job_id, pred, timeout, what="the job"):
        """Polls the job until pred(job dict) is true; returns the dict or raises SlurmError."""
        deadline = time.monotonic() + timeout
        info = {}
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info and pred(info):
                return info
            time.sleep(0.1)
        raise SlurmError(f"job {job_id}: timed out after {timeout}s waiting for {what}; "
                         f"last state {info.get('JobState')} reason {info.get('Reason')}\n"
                         f"{self.log_tails()}")

    def wait_job_state(self, job_id, states, timeout):
        states = (states,) if isinstance(states, str) else tuple(states)
        return self.wait_job(job_id, lambda j: j.get("JobState") in states, timeout,
                             what=f"state {'/'.join(states)}")

    # ------------------------------------------------------------------ diagnostics

    def log_tails(self, lines=25):
        """The last lines of every daemon log, for assertion messages."""
        if self.dir is None:
            return ""
        parts = []
        logs = sorted((self.dir / "log").glob("*.log")) + [self.dir / "munge" / "munged.log"]
        for log in logs:
            try:
                tail = log.read_text(errors="replace").splitlines()
            except OSError:
                continue
            # Noise of every start: the MPI plugins nobody uses, and munged's info lines.
            tail = [t for t in tail if not re.search(r"pmix|MPI|Info: ", t)][-lines:]
            parts.append(f"--- {log.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)
