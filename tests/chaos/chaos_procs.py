"""Processes of a chaos round (tests/chaos/chaos.py): ports, signals, and the round's processes
found through /proc by the marker in their environment."""

import os
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def marked_pids(marker):
    """Pids of the processes whose environment holds CHAOS_ROUND=marker."""
    needle = ("CHAOS_ROUND=" + marker).encode() + b"\0"
    pids = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env + b"\0":
            pids.append(int(name))
    return pids


def has_marker(pid, marker):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return ("CHAOS_ROUND=" + marker).encode() + b"\0" in f.read() + b"\0"
    except OSError:
        return False


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def node_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"CHAOS_NODE="):
                    return item[11:].decode()
    except OSError:
        pass
    return "?"


def ppid_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return "?"


def signal_pid(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "TORCHELASTIC_", "TORCH_ELASTIC_", "CHAOS_", "RANK",
                                "WORLD_SIZE", "MASTER_", "LOCAL_", "GROUP_", "ROLE_"))}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               LC_ALL="C")
    return env


def parse_kv(line):
    out = {}
    for part in line.split():
        k, _, v = part.partition("=")
        out[k] = v
    return out
