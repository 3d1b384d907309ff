"""ddprun's TCPStore-compatible store against PyTorch's own TCPStore, both directions.

1. PyTorch's client (torch.distributed.TCPStore) against ddprun's server (tests/store_host).
2. ddprun's client (tests/store_cli) against PyTorch's libuv server, with cross-checks.

Hardening, the job token, `clear` and outsiders: test_store_hardening.py. Helpers: storelib.py.
Wire format: see docs/store-protocol.md and rendezvous/store_protocol.hpp.
"""

import threading
import time

import pytest
from storelib import GET, LOCAL, WAIT, Raw, client, raw_get, td

torch_dist = pytest.importorskip("torch.distributed")
TCPStore = torch_dist.TCPStore


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
