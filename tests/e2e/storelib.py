"""Helpers for the store tests (test_store.py, test_store_hardening.py): the wire format spoken
with raw sockets, ddprun's store host and client as line-driven processes (tests/store_host,
tests/store_cli), and PyTorch's own TCPStore client. Their fixtures are in conftest.py.

Wire format: see docs/store-protocol.md and rendezvous/store_protocol.hpp.
"""

import datetime
import os
import queue
import resource
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest


SOURCE = Path(os.environ.get("DDPRUN_SOURCE", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("DDPRUN_BUILD", SOURCE / "build"))
# DDPRUN_STORE_HOST runs the tests against another build of store_host (an older one, to see
# which tests fail there).
STORE_HOST = Path(os.environ.get("DDPRUN_STORE_HOST", BUILD / "tests" / "store_host"))
STORE_CLI = BUILD / "tests" / "store_cli"

LOCAL = "127.0.0.1"


def td(seconds):
    return datetime.timedelta(seconds=seconds)


# --------------------------------------------------------------------------- wire helpers

MAGIC = 0x3C85F7CE


def u64(n):
    return struct.pack("<Q", n)


def i64(n):
    return struct.pack("<q", n)


def s(b):
    return u64(len(b)) + b


VALIDATE = b"\x00" + struct.pack("<I", MAGIC)


def PING(nonce):
    return b"\x0d" + struct.pack("<I", nonce)


def SET(k, v):
    return b"\x01" + s(k) + s(v)


def GET(k):
    return b"\x03" + s(k)


def ADD(k, n):
    return b"\x04" + s(k) + i64(n)


def WAIT(*keys):
    return b"\x06" + u64(len(keys)) + b"".join(s(k) for k in keys)


NUMKEYS = b"\x07"


def AUTH(token):
    return b"\xd7" + s(token)


class Raw:
    """A raw TCP connection to a store; optionally bound to a source address."""

    def __init__(self, port, host=LOCAL, source=None, validate=True):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if source:
            self.sock.bind((source, 0))
        self.sock.settimeout(5)
        self.sock.connect((host, port))
        if validate:
            self.send(VALIDATE)

    def send(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        out = b""
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no complete reply within {timeout}s (got {out!r} of {n} bytes)")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(out))
            except socket.timeout:
                continue
            if not chunk:
                pytest.fail(f"connection closed after {len(out)} of {n} reply bytes")
            out += chunk
        return out

    def i64(self):
        return struct.unpack("<q", self.recv_exact(8))[0]

    def u8(self):
        return self.recv_exact(1)[0]

    def string(self):
        n = struct.unpack("<Q", self.recv_exact(8))[0]
        return self.recv_exact(n)

    def ping(self, nonce=0x1234):
        self.send(PING(nonce))
        assert struct.unpack("<I", self.recv_exact(4))[0] == nonce

    def nothing_within(self, seconds):
        """True if no byte arrives within `seconds` (and the connection stays open)."""
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(1, socket.MSG_PEEK)
        except socket.timeout:
            return True
        return False if data else pytest.fail("connection closed")

    def assert_closed(self, timeout=3.0):
        """The server closes this connection within `timeout` (any pending bytes are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"connection still open after {timeout}s")
            self.sock.settimeout(left)
            try:
                if not self.sock.recv(65536):
                    return
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return

    def close(self):
        self.sock.close()


# --------------------------------------------------------------------------- processes


class LineProc:
    """A subprocess whose stdout lines are read by a thread into a queue."""

    def __init__(self, args, stderr_path, preexec_fn=None):
        self.stderr_path = stderr_path
        self._err = open(stderr_path, "wb")
        self.proc = subprocess.Popen([str(a) for a in args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, text=True,
                                     bufsize=1, preexec_fn=preexec_fn)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def readline(self, timeout=30.0):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"{self.proc.args[0]}: no output line within {timeout}s\n{self.stderr()}")
        if line is None:
            pytest.fail(f"{self.proc.args[0]} exited (rc={self.proc.wait()})\n{self.stderr()}")
        return line

    def write(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def stderr(self):
        return Path(self.stderr_path).read_text(errors="replace")

    def stop(self, timeout=5.0):
        """Closes stdin and waits for the exit; kills on timeout. Returns the exit code."""
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._err.close()
        return rc


class StoreHost(LineProc):
    """store_host; `limits` are its NAME=VALUE guard limits, `nofile` its RLIMIT_NOFILE."""

    def __init__(self, tmp_path, host=LOCAL, token=None, nofile=None, **limits):
        n = len(list(tmp_path.glob("store_host*.stderr")))
        args = [STORE_HOST, host, 0] + ([token] if token else [])
        if limits:
            args += ([] if token else ["-"]) + [f"{k}={v}" for k, v in limits.items()]

        def limit_fds():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        super().__init__(args, tmp_path / f"store_host{n}.stderr", preexec_fn=limit_fds)
        line = self.readline()
        assert line.startswith("port "), line
        self.port = int(line.split()[1])

    def connections(self):
        self.write("connections\n")
        line = self.readline()
        assert line.startswith("connections "), line
        return int(line.split()[1])

    def clear(self):
        self.write("clear\n")
        self.connections()  # store_host handles stdin in order; Clear() returns once done

    def rss_kb(self, field="VmRSS"):
        """Resident memory in KiB; field="VmHWM" gives the peak so far."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field}")

    def log_count(self, text):
        """Lines of store_host's log that contain `text`."""
        return sum(text in line for line in self.stderr().splitlines())

    def assert_alive(self):
        assert self.proc.poll() is None, f"store_host died (rc={self.proc.returncode})\n{self.stderr()}"


class Cli(LineProc):
    def __init__(self, tmp_path, port, token=None):
        n = len(list(tmp_path.glob("store_cli*.stderr")))
        args = [STORE_CLI, LOCAL, port] + ([token] if token else [])
        super().__init__(args, tmp_path / f"store_cli{n}.stderr")

    def __call__(self, command, timeout=30.0):
        self.write(command + "\n")
        return self.readline(timeout).rstrip()


def client(port, world_size=None, timeout=15.0):
    """PyTorch's own TCPStore client. The generous timeout: in this sandbox torch's client
    connect occasionally stalls for 5 s (seen against PyTorch's own server as well)."""
    from torch.distributed import TCPStore
    return TCPStore(LOCAL, port, world_size=world_size, is_master=False,
                    wait_for_workers=False, timeout=td(timeout))


def raw_get(port, key):
    r = Raw(port)
    r.send(GET(key))
    value = r.string()
    r.close()
    return value
