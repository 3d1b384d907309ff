"""ddprun's TCPStore-compatible store against PyTorch's own TCPStore, both directions.

1. PyTorch's client (torch.distributed.TCPStore) against ddprun's server (tests/store_host).
2. ddprun's client (tests/store_cli) against PyTorch's libuv server, with cross-checks.
3. Hardening of ddprun's server, driven with raw sockets.
4. The job token (ddprun's AUTH extension).
5. store_host's `clear`.
6. Outsiders: what a connection that has not proved the job token may cost.

Wire format: see docs/store-protocol.md and rendezvous/store_protocol.hpp.
"""

import datetime
import os
import queue
import resource
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

torch_dist = pytest.importorskip("torch.distributed")
TCPStore = torch_dist.TCPStore

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


@pytest.fixture
def host_factory(tmp_path):
    hosts = []

    def start(host=LOCAL, token=None, **limits):
        h = StoreHost(tmp_path, host, token, **limits)
        hosts.append(h)
        return h

    yield start
    for h in hosts:
        h.stop()


@pytest.fixture
def server(host_factory):
    """ddprun's store server on 127.0.0.1, no token."""
    return host_factory()


@pytest.fixture
def cli_factory(tmp_path):
    clis = []

    def start(port, token=None):
        c = Cli(tmp_path, port, token)
        clis.append(c)
        return c

    yield start
    for c in clis:
        c.stop()


def client(port, world_size=None, timeout=15.0):
    """PyTorch's own TCPStore client. The generous timeout: in this sandbox torch's client
    connect occasionally stalls for 5 s (seen against PyTorch's own server as well)."""
    return TCPStore(LOCAL, port, world_size=world_size, is_master=False,
                    wait_for_workers=False, timeout=td(timeout))


def raw_get(port, key):
    r = Raw(port)
    r.send(GET(key))
    value = r.string()
    r.close()
    return value


# =========================================================================== 1. PyTorch client


def test_torch_set_get_add(server):
    st = client(server.port)
    st.set("k", "v")
    assert st.get("k") == b"v"
    st.set("k", b"\x00\xffbinary")
    assert st.get("k") == b"\x00\xffbinary"
    assert st.add("c", 5) == 5
    assert st.add("c", -7) == -2
    assert st.get("c") == b"-2"  # stored as decimal ASCII
    assert st.add("c", 0) == -2
    assert st.add("fresh", -3) == -3
    st.set("n", "40")
    assert st.add("n", 2) == 42
    # Another client sees the same data.
    assert client(server.port).get("c") == b"-2"


def test_torch_add_non_numeric_closes_only_that_connection(server):
    bad = client(server.port)
    good = client(server.port)
    good.set("word", "abc")
    with pytest.raises(Exception):
        bad.add("word", 1)
    with pytest.raises(Exception):  # that connection is gone (SET has no reply: use one that has)
        bad.num_keys()
    assert good.get("word") == b"abc"
    assert good.add("num", 1) == 1
    server.assert_alive()


def test_torch_world_size_sends_init_add(server):
    """world_size=2 with wait_for_workers: each client ADDs "init/" 1 and polls it until 2."""
    made, errors = [], []

    def make():
        try:
            made.append(TCPStore(LOCAL, server.port, world_size=2, is_master=False,
                                 wait_for_workers=True, timeout=td(10)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=make) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not errors and len(made) == 2, errors
    a, b = made
    assert raw_get(server.port, b"init/") == b"2"
    assert a.num_keys() == 1  # init/ only
    assert "init/" not in a.list_keys()  # list_keys hides unprefixed keys
    b.set("x", "1")
    assert b.get("x") == b"1"  # SET has no reply: sync on b before asking through a
    assert a.num_keys() == 2
    # world_size=2 without waiting adds to init/ as well (or not at all); it never blocks.
    client(server.port, world_size=2)


def test_torch_compare_set(server):
    st = client(server.port)
    # Missing key, empty expected: stores desired and returns it.
    assert st.compare_set("m", "", "first") == b"first"
    assert st.get("m") == b"first"
    # Missing key, non-empty expected: returns expected, stores nothing.
    assert st.compare_set("absent", "zz", "x") == b"zz"
    assert not st.check(["absent"])
    assert st.num_keys() == 1
    # Present key: replaced when equal to expected, returns the value now stored.
    assert st.compare_set("m", "first", "second") == b"second"
    assert st.compare_set("m", "wrong", "third") == b"second"
    assert st.get("m") == b"second"


def test_torch_check(server):
    st = client(server.port)
    assert not st.check(["a"])
    st.set("a", "1")
    assert st.check(["a"])
    assert not st.check(["a", "b"])
    st.set("b", "")
    assert st.check(["a", "b"])


def test_torch_wait_succeeds_when_key_set_later(server):
    waiter = client(server.port, timeout=10)
    setter = client(server.port)
    done = threading.Event()
    errors = []

    def run():
        try:
            waiter.wait(["late1", "late2"], td(10))
            done.set()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    setter.set("late1", "x")
    assert not done.wait(0.2) or errors == []  # one key is not enough
    setter.set("late2", "y")
    t.join(10)
    assert not t.is_alive() and not errors, errors
    assert done.is_set()
    assert waiter.get("late2") == b"y"


def test_wait_reply_is_deferred_until_set(server):
    """Deterministic form of the above: the WAIT reply is held until a SET arrives."""
    r = Raw(server.port)
    r.send(WAIT(b"/later"))
    assert r.nothing_within(0.3)
    client(server.port).set("later", "v")
    assert r.u8() == 0  # STOP_WAITING
    r.send(GET(b"/later"))
    assert r.string() == b"v"


def test_torch_wait_timeout_then_connection_still_works(server):
    st = client(server.port)
    st.set("present", "1")
    start = time.monotonic()
    with pytest.raises(torch_dist.DistStoreError):
        st.wait(["never"], td(0.3))
    assert time.monotonic() - start < 4
    # CANCEL_WAIT was answered: the stream is in sync.
    assert st.num_keys() == 1
    st.set("after", "2")
    assert st.num_keys() == 2
    assert st.get("after") == b"2"
    # A later SET of the awaited key must not send a stray reply to this client.
    late = client(server.port)
    late.set("never", "now")
    assert late.get("never") == b"now"  # the SET has been applied
    assert st.add("ctr", 3) == 3
    assert st.get("present") == b"1"


def test_torch_num_keys_and_delete_key(server):
    st = client(server.port)
    assert st.num_keys() == 0
    st.set("a", "1")
    st.set("b", "2")
    st.add("c", 1)
    assert st.num_keys() == 3
    assert st.delete_key("a") is True
    assert st.delete_key("a") is False
    assert st.num_keys() == 2
    assert not st.check(["a"])


def test_torch_append_multi_get_multi_set_list_keys(server):
    st = client(server.port)
    st.append("log", "ab")
    st.append("log", "cd")
    assert st.get("log") == b"abcd"
    st.multi_set(["x", "y", "z"], ["1", "22", ""])
    assert st.multi_get(["z", "x", "y"]) == [b"", b"1", b"22"]
    assert sorted(st.list_keys()) == ["log", "x", "y", "z"]
    assert st.num_keys() == 4


def test_torch_queues(server):
    st = client(server.port)
    other = client(server.port)
    assert st.queue_len("q") == 0
    with pytest.raises(torch_dist.QueueEmptyError):
        st.queue_pop("q", block=False)
    st.queue_push("q", "a")
    st.queue_push("q", b"b")
    assert st.queue_len("q") == 2
    assert st.check(["q"])  # a non-empty queue counts as present
    assert st.queue_pop("q") == b"a"
    assert st.queue_pop("q", block=False) == b"b"
    assert st.queue_len("q") == 0
    with pytest.raises(torch_dist.QueueEmptyError):
        st.queue_pop("q", block=False)
    # A blocking pop is completed by another client's push.
    got = []
    t = threading.Thread(target=lambda: got.append(st.queue_pop("q2")))
    t.start()
    other.queue_push("q2", "late")
    t.join(10)
    assert got == [b"late"]
    assert other.queue_len("q2") == 0
    assert st.num_keys() == 0  # queues are not keys


def test_torch_barrier(server):
    a = client(server.port)
    b = client(server.port)
    errors = []

    def run(st):
        try:
            st.barrier("bar", 2)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(st,)) for st in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads) and not errors, errors


def test_torch_many_clients(server):
    n, adds = 50, 5
    errors = []
    barrier = threading.Barrier(n)

    def run(i):
        try:
            st = client(server.port, timeout=20)
            barrier.wait(20)
            st.set(f"k{i}", str(i))
            for _ in range(adds):
                st.add("counter", 1)
            assert st.get(f"k{i}") == str(i).encode()
            st.add("done", 1)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors[:3]
    st = client(server.port)
    assert st.get("counter") == str(n * adds).encode()
    assert st.get("done") == str(n).encode()
    assert st.num_keys() == n + 2


# =========================================================================== 2. ddprun client


@pytest.fixture
def torch_server():
    master = TCPStore(LOCAL, 0, is_master=True, use_libuv=True, wait_for_workers=False,
                      timeout=td(10))
    yield master
    del master


LOOSE_NUMBERS = ["5abc", " 7", "+3", "\t-4\n", "12 34"]


def loose_adds(st):
    """ADD on stored values that are numbers only to std::stoll."""
    sums = []
    for i, text in enumerate(LOOSE_NUMBERS):
        st.set(f"loose{i}", text)
        sums.append(st.add(f"loose{i}", 1))
    return sums


def test_add_reads_stored_values_as_pytorchs_server_does(server, torch_server):
    expected = loose_adds(torch_server)
    assert expected == [6, 8, 4, -3, 13]  # PyTorch's server, side by side
    assert loose_adds(client(server.port)) == expected


def test_ddprun_client_against_torch_server(torch_server, cli_factory):
    m = torch_server
    cli = cli_factory(m.port)
    base = m.num_keys()  # whatever the master itself keeps (none expected)
    assert cli("set a 1") == "ok"
    assert cli("get a") == "ok 1"
    assert cli("add c 5") == "ok 5"
    assert cli("add c -7") == "ok -2"
    assert cli("get c") == "ok -2"
    # compare_set's three cases.
    assert cli("cas m - first") == "ok first"
    assert cli("cas absent zz x") == "ok zz"
    assert cli("check absent") == "ok 0"
    assert cli("cas m first second") == "ok second"
    assert cli("cas m wrong third") == "ok second"
    assert cli("check a c") == "ok 1"
    assert cli("check a zz") == "ok 0"
    # wait: present keys at once; a missing one times out and the connection stays usable.
    assert cli("wait 1000 a c") == "ok"
    start = time.monotonic()
    reply = cli("wait 300 never")
    assert reply.startswith("error") and "never" in reply, reply
    assert time.monotonic() - start < 4
    assert cli("numkeys") == f"ok {base + 3}"  # a, c, m
    assert cli("delete a") == "ok 1"
    assert cli("delete a") == "ok 0"
    assert cli("append log ab") == "ok"
    assert cli("append log cd") == "ok"
    assert cli("get log") == "ok abcd"
    assert cli("multiset x 1 y 22") == "ok"
    assert cli("multiget y x") == "ok 22 1"
    assert sorted(cli("list").split()[1:]) == ["c", "log", "m", "x", "y"]
    assert cli("qlen q") == "ok 0"
    assert cli("qpop q") == "ok"  # empty
    assert cli("qpush q v1") == "ok"
    assert cli("qpush q v2") == "ok"
    assert cli("qlen q") == "ok 2"
    assert cli("qpop q") == "ok v1"
    assert cli("qlen q") == "ok 1"
    assert cli("numkeys") == f"ok {base + 5}"

    # Cross-checks: ddprun's client and PyTorch's see the same keys ("/" prefix).
    assert m.get("x") == b"1"
    assert m.get("c") == b"-2"
    assert m.get("log") == b"abcd"
    assert m.queue_pop("q", block=False) == b"v2"
    m.set("fromtorch", "tv")
    assert cli("get fromtorch") == "ok tv"
    assert m.add("c", 10) == 8
    assert cli("add c 1") == "ok 9"
    assert m.get("c") == b"9"
    m.queue_push("tq", "tqv")
    assert cli("qpop tq") == "ok tqv"
    # A ddprun wait is released by a PyTorch set (the wait is sent before the set).
    cli.write("wait 5000 released\n")
    m.set("released", "1")
    assert cli.readline() == "ok"
    assert cli("get released") == "ok 1"
    assert cli.stop() == 0


def test_ddprun_client_get_waits_for_torch_set(torch_server, cli_factory):
    cli = cli_factory(torch_server.port)
    cli.write("get later\n")
    torch_server.set("later", "value")
    assert cli.readline() == "ok value"


# =========================================================================== 3. hardening


def test_non_store_first_bytes_closed_others_unaffected(server):
    healthy = client(server.port)
    healthy.set("h", "1")
    http = Raw(server.port, validate=False)
    http.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    http.assert_closed()
    # Wrong magic is closed too.
    wrong = Raw(server.port, validate=False)
    wrong.send(b"\x00\x01\x02\x03\x04")
    wrong.assert_closed()
    # SET as the first request (no VALIDATE) is closed and not applied.
    novalidate = Raw(server.port, validate=False)
    novalidate.send(SET(b"/sneaky", b"1"))
    novalidate.assert_closed()
    assert healthy.get("h") == b"1"
    assert not healthy.check(["sneaky"])
    assert healthy.add("h2", 2) == 2
    server.assert_alive()


def test_unknown_opcode_closes_only_that_connection(server):
    healthy = client(server.port)
    r = Raw(server.port)
    r.ping()
    r.send(b"\x63")
    r.assert_closed()
    r2 = Raw(server.port)
    r2.send(b"\xfe" + b"\x00" * 16)
    r2.assert_closed()
    healthy.set("still", "here")
    assert healthy.get("still") == b"here"


@pytest.mark.parametrize("request_bytes", [
    pytest.param(b"\x03" + u64(2**40), id="get-key"),
    pytest.param(b"\x01" + s(b"/k") + u64(2**40), id="set-value"),
    pytest.param(b"\x0a" + u64(2**40), id="multiget-count"),
    pytest.param(b"\x0b" + u64(2**62), id="multiset-count"),
    pytest.param(b"\x02" + s(b"/k") + s(b"") + u64(2**63), id="cas-desired"),
])
def test_oversized_length_closes_quickly_without_allocating(server, request_bytes):
    healthy = client(server.port)
    rss_before = server.rss_kb()
    r = Raw(server.port)
    start = time.monotonic()
    r.send(request_bytes)
    r.assert_closed(timeout=2.0)
    assert time.monotonic() - start < 2.0
    assert server.rss_kb() < rss_before + 64 * 1024, "store_host grew by more than 64 MiB"
    healthy.set("ok", "1")
    assert healthy.get("ok") == b"1"
    server.assert_alive()


def test_request_split_into_single_bytes(server):
    r = Raw(server.port, validate=False)
    data = VALIDATE + PING(77) + SET(b"/split", b"value") + GET(b"/split") + ADD(b"/n", -5)
    for i in range(len(data)):
        r.send(data[i:i + 1])
    assert struct.unpack("<I", r.recv_exact(4))[0] == 77
    assert r.string() == b"value"
    assert r.i64() == -5
    assert client(server.port).get("split") == b"value"


def test_several_requests_in_one_write(server):
    r = Raw(server.port, validate=False)
    r.send(VALIDATE + PING(5) + SET(b"/a", b"1") + SET(b"/b", b"22") + GET(b"/b")
           + ADD(b"/a", 4) + b"\x05" + u64(2) + s(b"/a") + s(b"/zz") + NUMKEYS
           + WAIT(b"/a") + b"\x08" + s(b"/b") + NUMKEYS + GET(b"/missing"))
    assert struct.unpack("<I", r.recv_exact(4))[0] == 5
    assert r.string() == b"22"
    assert r.i64() == 5
    assert r.u8() == 1  # CHECK: NOT_READY
    assert r.i64() == 2
    assert r.u8() == 0  # WAIT: STOP_WAITING at once
    assert r.i64() == 1  # DELETE_KEY
    assert r.i64() == 1
    assert r.string() == b""  # GET of a missing key: empty
    assert r.nothing_within(0.1)


def test_idle_clients_are_not_timed_out(server):
    st = client(server.port)
    r = Raw(server.port)
    st.set("before", "1")
    assert server.connections() == 2
    time.sleep(3)  # deliberately idle; nothing is awaited here
    assert server.connections() == 2
    assert st.get("before") == b"1"
    r.ping(99)
    r.send(GET(b"/before"))
    assert r.string() == b"1"


def test_a_multi_get_larger_than_the_unsent_limit_is_answered(server):
    """One reply of 300 MiB (five 60 MiB values the store accepted): the store took its size for
    a client that does not read and closed the connection (found by an attacking helper);
    PyTorch's server answers. Only replies piling up behind one are that sign."""
    st = client(server.port, timeout=60.0)
    value = bytes(range(256)) * (60 * 4096)  # 60 MiB
    keys = [f"big{i}" for i in range(5)]
    for k in keys:
        st.set(k, value)
    got = st.multi_get(keys)
    assert [len(v) for v in got] == [len(value)] * 5
    assert all(v == value for v in got)
    assert st.add("ctr", 1) == 1  # the connection lives on
    server.assert_alive()


def test_slow_reader_does_not_stall_others(server):
    st = client(server.port)
    st.set("big", b"x" * 4096)
    slow = Raw(server.port)
    request = GET(b"/big") * 2000
    stop = threading.Event()
    sent = [0]

    def flood():
        slow.sock.settimeout(10)
        try:
            while not stop.is_set() and sent[0] < 20000:  # up to ~80 MB of replies
                slow.sock.sendall(request)
                sent[0] += 2000
        except OSError:
            pass  # the server may close it for not reading; that is fine

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    try:
        wait_deadline = time.monotonic() + 10
        while sent[0] < 4000 and time.monotonic() < wait_deadline:
            time.sleep(0.01)
        assert sent[0] >= 4000, "the flood did not get going"
        other = client(server.port)
        start = time.monotonic()
        for i in range(100):
            other.set(f"f{i}", str(i))
            assert other.get(f"f{i}") == str(i).encode()
        assert time.monotonic() - start < 3.0, "other clients stalled behind a slow reader"
        assert st.add("ctr", 1) == 1
    finally:
        stop.set()
        slow.close()
        t.join(10)
    server.assert_alive()
    # The slow reader's buffered replies are dropped with its connection.
    wait_deadline = time.monotonic() + 5
    while server.connections() != 2 and time.monotonic() < wait_deadline:
        time.sleep(0.02)
    assert server.connections() == 2


@pytest.mark.parametrize("suspended", [True, False])
def test_a_client_suspended_while_it_waits_does_not_count_that_time(server, cli_factory,
                                                                     suspended):
    """The whole job suspended (SIGSTOP, Slurm's scontrol suspend) while a worker waits on a key,
    as the DDP core's TORCH_DISTRIBUTED_DEBUG=DETAIL check does: the time it did not run does not
    count toward its wait, which timed out the moment the job resumed. A client that runs all
    along still times out."""
    cli = cli_factory(server.port)
    setter = cli_factory(server.port)
    cli.write("wait 2000 late\n")
    time.sleep(0.3)
    if suspended:
        cli.proc.send_signal(signal.SIGSTOP)
        time.sleep(3.0)
        cli.proc.send_signal(signal.SIGCONT)
        time.sleep(0.5)
        assert setter("set late v") == "ok"
        assert cli.readline(10).rstrip() == "ok"
    else:
        assert cli.readline(10).rstrip().startswith("error store ")


def test_client_disconnect_mid_wait_is_cleaned_up(server):
    r = Raw(server.port)
    r.send(WAIT(b"/gone"))
    assert r.nothing_within(0.1)
    r.close()
    st = client(server.port)
    st.set("gone", "1")  # must not write to a freed connection
    assert st.get("gone") == b"1"
    server.assert_alive()


def test_cancel_wait_without_pending_wait(server):
    r = Raw(server.port)
    r.send(b"\x0c")
    assert r.u8() == 1  # WAIT_CANCELED
    r.send(NUMKEYS)
    assert r.i64() == 0


# =========================================================================== 4. token

TOKEN = "s3cret-token"


def test_token_torch_client_refused_before_any_proof(host_factory):
    h = host_factory(token=TOKEN)
    start = time.monotonic()
    with pytest.raises(Exception):
        st = client(h.port, timeout=1.0)
        st.add("k", 1)  # if construction got through, the first operation fails
    assert time.monotonic() - start < 10
    h.assert_alive()


def test_token_wrong_token_fails_with_token_message(host_factory, cli_factory):
    h = host_factory(token=TOKEN)
    cli = cli_factory(h.port, token="wrong")
    line = cli.readline()
    assert line.startswith("error") and "token" in line, line
    assert cli.stop() == 1


def test_token_right_token_admits_client_and_host(host_factory, cli_factory):
    h = host_factory(token=TOKEN)
    cli = cli_factory(h.port, token=TOKEN)
    assert cli("set k v", timeout=15) == "ok"
    assert cli("get k") == "ok v"
    st = client(h.port)
    assert st.get("k") == b"v"


def test_token_raw_auth_admits_host_but_not_other_loopback_address(host_factory):
    h = host_factory(host="", token=TOKEN)
    # Before any proof, a raw client from 127.0.0.1 is refused at its first request.
    early = Raw(h.port)
    early.send(NUMKEYS)
    early.assert_closed()
    # A wrong token is refused.
    wrong = Raw(h.port)
    wrong.send(AUTH(b"nope"))
    wrong.assert_closed()
    # The right token is acknowledged, and that connection works.
    proof = Raw(h.port)
    proof.send(AUTH(TOKEN.encode()))
    assert proof.u8() == 1
    proof.ping(3)
    proof.send(SET(b"/k", b"v"))
    # Now PyTorch clients from 127.0.0.1 are admitted without a token.
    st = client(h.port)
    assert st.get("k") == b"v"
    # A client from another address (127.0.0.2) without the token is still refused.
    stranger = Raw(h.port, source="127.0.0.2")
    stranger.send(PING(1) + GET(b"/k"))
    stranger.assert_closed()
    stranger2 = Raw(h.port, source="127.0.0.2")
    stranger2.send(NUMKEYS)
    stranger2.assert_closed()
    # With the token, 127.0.0.2 is admitted.
    friend = Raw(h.port, source="127.0.0.2")
    friend.send(AUTH(TOKEN.encode()))
    assert friend.u8() == 1
    friend.send(GET(b"/k"))
    assert friend.string() == b"v"
    assert st.num_keys() == 1


# =========================================================================== 5. clear


def test_clear_empties_key_space(server):
    """A clear starts a new round of workers: the key space and queues are empty, and the
    connections that used them (an earlier round's workers) are closed."""
    st = client(server.port)
    st.set("a", "1")
    st.multi_set(["b", "c"], ["2", "3"])
    st.queue_push("q", "x")
    assert st.num_keys() == 3
    server.clear()
    with pytest.raises(Exception):
        st.num_keys()
    fresh = client(server.port)
    assert fresh.num_keys() == 0
    assert fresh.list_keys() == []
    assert not fresh.check(["a"])
    assert fresh.queue_len("q") == 0
    # The store keeps working after a clear.
    fresh.set("a", "new")
    assert fresh.get("a") == b"new"
    assert fresh.add("c", 1) == 1


# =========================================================================== 6. outsiders
# A store with a job token, attacked by connections that never prove it. The limits are
# GuardLimits (rendezvous/store_guard.hpp), documented in docs/store-protocol.md §5.


def MULTI_SET_HEADER(count):
    return b"\x0b" + i64(count)


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= n


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout}s for {what}")
        time.sleep(0.02)


def authenticated(port, source=None):
    r = Raw(port, source=source)
    r.send(AUTH(TOKEN.encode()))
    assert r.u8() == 1
    return r


def hostile_sender(port, head, body, total):
    """Sends `head`, then `body` until `total` bytes or until the server closes; returns the
    bytes sent."""
    sent = 0
    try:
        r = Raw(port)
        r.sock.settimeout(10)
        r.send(head)
        sent = len(head)
        while sent < total:
            r.sock.sendall(body)
            sent += len(body)
    except OSError:
        pass  # closed by the server: what a bounded store does
    return sent


def test_preauth_memory_bounded_with_100_hostile_connections(host_factory):
    h = host_factory(token=TOKEN)
    # Half announce a 64 MiB value and stream it; half announce a MULTI_SET of 128 Ki keys and
    # stream small keys. Each tries to send 1 MiB before proving the token.
    kinds = [(SET(b"/k", b"")[:-8] + u64(64 << 20), b"v" * 65536),
             (MULTI_SET_HEADER(128 * 1024), (s(b"/key") + s(b"v")) * 2048)]
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        hostile_sender(h.port, *kinds[i % 2], 1 << 20))) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 100
    # The kernel's socket buffers may have taken each sender's whole 1 MiB: wait until the
    # store has read all it will (it closes each after the handshake bound).
    wait_for(lambda: h.connections() == 0, 30, "the hostile connections to be closed")
    peak_kib = h.rss_kb("VmHWM")
    print(f"store_host peak RSS {peak_kib} KiB with 100 hostile connections")
    assert peak_kib < 64 * 1024, f"store_host peaked at {peak_kib} KiB with 100 hostile connections"
    assert h.log_count("bytes before finishing the handshake") == 100
    r = authenticated(h.port)
    r.send(SET(b"/ok", b"1") + GET(b"/ok"))
    assert r.string() == b"1"


def test_unauthenticated_connection_closed_after_deadline(host_factory):
    h = host_factory(token=TOKEN, handshake_ms=1000)
    silent = Raw(h.port, validate=False)
    validated = Raw(h.port)
    pinged = Raw(h.port)
    pinged.ping(7)  # PyTorch clients ping right after VALIDATE: answered before the token
    proof = authenticated(h.port)
    for r in (silent, validated, pinged):
        r.assert_closed(timeout=5.0)
    assert h.log_count("sent no VALIDATE within 1.0s") == 1
    assert h.log_count("did not prove the job token within 1.0s") == 2
    # Ready connections have no deadline: the proved one and a PyTorch client admitted
    # through it stay open past it.
    st = client(h.port)
    st.set("k", "v")
    assert proof.nothing_within(1.5)
    proof.ping(8)
    assert st.get("k") == b"v"


def test_idle_connection_flood_does_not_block_new_connections(host_factory):
    flood_size = 600
    if not raise_nofile(flood_size + 64):
        pytest.skip("cannot open enough sockets here")
    # store_host may open 256 files: a flood it kept would exhaust them. Past 64 connections
    # in the handshake, each new one evicts the oldest (evict_after_ms=0: at once).
    h = host_factory(token=TOKEN, nofile=256, max_handshaking=64, evict_after_ms=0)
    flood = []
    for i in range(flood_size):
        r = Raw(h.port, validate=i % 2 == 0)
        flood.append(r)
    try:
        r = authenticated(h.port)
        r.ping(1)
        st = client(h.port)
        st.set("after", "flood")
        assert st.get("after") == b"flood"
        assert h.connections() <= 64 + 2
        assert h.log_count("connections were in the handshake") >= flood_size - 64
    finally:
        for r in flood:
            r.close()


def test_connections_per_host_capped(host_factory):
    h = host_factory(token=TOKEN, per_host=4)
    held = [authenticated(h.port) for _ in range(4)]
    over = Raw(h.port)
    over.assert_closed()
    assert h.log_count("already has 4 connections (the per-host limit)") == 1
    # Another host is not affected, and a freed slot is usable again.
    authenticated(h.port, source="127.0.0.2").ping(2)
    held.pop().close()
    wait_for(lambda: h.connections() <= 4, 5, "the closed connection to be gone")
    authenticated(h.port).ping(3)


def test_failed_auth_is_throttled(host_factory):
    h = host_factory(token=TOKEN)
    seconds = 2.0
    stop = time.monotonic() + seconds
    tries = [0]

    def guess():
        while time.monotonic() < stop:
            r = None
            try:
                r = Raw(h.port, source="127.0.0.2")
                r.send(AUTH(b"guess"))
                r.sock.settimeout(max(0.05, stop - time.monotonic()))
                while r.sock.recv(64):
                    pass
            except OSError:
                pass  # closed, or still waiting for its turn at the end of the window
            finally:
                if r:
                    r.close()
            tries[0] += 1

    threads = [threading.Thread(target=guess) for _ in range(16)]
    for t in threads:
        t.start()
    # Meanwhile another host proves the token (Raw's reads fail after 5 s).
    authenticated(h.port, source="127.0.0.3").ping(4)
    for t in threads:
        t.join(30)
    judged = h.log_count("refused: wrong job token")
    # Verdicts on 127.0.0.2 are spaced 0.1, 0.2, 0.4, 0.8 s after failures: 5 within 2 s.
    assert judged <= 6, f"{judged} wrong tokens judged in {seconds}s ({tries[0]} tries)"
    print(f"{tries[0] / seconds:.0f} tries/s, {judged / seconds:.1f} verdicts/s")
