"""The store host killed, stopped (SIGSTOP, as a partition looks) or signalled while the other
nodes' workers run or finish, with real c10d agents on 127.0.0.x (test_elastic_faults.py has the
other agents' pauses and races):

1. the store host SIGKILLed or SIGSTOPped while another node's workers run: they may end by
   themselves within 5 s (exit 0 when they all exit 0), else they are stopped (exit 1);
2. the store host SIGSTOPped just as another node's workers exit 0: that node exits 0 too;
3. the store host stopped by SIGHUP while another node's workers take their grace: that node
   says the store is gone, not that it did not run itself, and the host tells its one SIGHUP
   once; the host stopped, then killed: the others say who did not run;
4. an agent waiting for a round gets SIGTERM while the store host is paused (SIGSTOP): it
   abandons its unanswered request a second later and exits 143, saying so (it used to wait
   out read_timeout twice); an agent joining while the host is stopped says so, then joins.
"""

import re
import signal
import time

import pytest

from conftest import free_port, sh, wait_for
from test_elastic_faults import FINISH, c10d_agents
from test_multinode import (AGENT_TIMEOUT, FAST, c10d_args, node_env, outputs, starts,
                            wait_listening)


# Node 0's workers fail; node 1's ignore SIGTERM and take their whole grace.
HOST_FAILS = r'''
if [ "$NODE" = 0 ]; then sleep 1; exit 3; fi
trap '' TERM
while [ ! -e "$OUTDIR/stop" ]; do sleep 0.2; done
'''


def test_store_host_gone_during_anothers_grace_is_told_as_such(launch, tmp_path):
    out, agents = c10d_agents(launch, tmp_path, "2:2", 2, HOST_FAILS,
                              extra=["--max_restarts=1", "--shutdown_timeout=7"])
    wait_for(lambda: "stopping the workers" in agents[1].stderr(), 20,
             what="node 1 stopping its workers")
    agents[0].signal(signal.SIGHUP)
    assert agents[0].wait(15) == 128 + signal.SIGHUP, outputs(agents)
    assert agents[1].wait(15) == 1, outputs(agents)
    # The grace outlasts the host's wait for it (5 s): it finds the store gone. It ran the whole
    # time: its machine was stepped (and kept alive) through the grace.
    err = agents[1].stderr()
    assert "is gone" in err, outputs(agents)
    assert "did not run" not in err, outputs(agents)
    assert agents[0].stderr().count("SIGHUP") == 1, outputs(agents)


@pytest.mark.parametrize("finish,how", [(True, "kill"), (False, "kill"), (True, "stop")])
def test_store_host_killed_while_workers_run_lets_them_end_by_themselves(launch, tmp_path, finish,
                                                                         how):
    """The store host SIGKILLed while node 1's workers run: they may go on for 5 s. Found by the
    chaos suite (the host killed as the job ended): one agent stopped its workers at once and
    exited 1 where another's had just exited 0. Workers that then end by themselves with 0 make
    it exit 0; workers still running after the grace are stopped, and it exits 1. The host
    SIGSTOPped: the request that finds the store gone waits read_timeout first, and the grace
    counted from its start was over the moment it was said (found by an attacking helper)."""
    out, agents = c10d_agents(launch, tmp_path, "2:2", 2, FINISH, conf="read_timeout=5")
    wait_for(lambda: all(starts(out, n, lr) for n in range(2) for lr in range(2)), 15,
             what="every worker started")
    agents[0].signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    killed = time.monotonic()
    wait_for(lambda: "may go on for up to 5 s" in agents[1].stderr(), 15,
             what="node 1 finding the store gone")
    if finish:
        time.sleep(1.0)
        (out / "go").touch()
    rc = agents[1].wait(AGENT_TIMEOUT)
    took = time.monotonic() - killed
    err = agents[1].stderr()
    gone = r"is gone" if how == "kill" else r"no reply within 5000 ms"
    assert re.search(r"store 127\.0\.0\.1:\d+(:)? " + gone, err), outputs(agents)
    if finish:
        assert rc == 0, outputs(agents)
        assert "this node's workers had all exited 0 by then" in err, outputs(agents)
        assert "stopping the workers" not in err, outputs(agents)
    else:
        assert rc == 1, outputs(agents)
        assert re.search(r"stopping the workers: .*this node's workers did not end within 5 s "
                         r"after it", err), outputs(agents)
        assert 5 <= took < 15, f"{took:.1f} s\n{outputs(agents)}"


def test_store_host_stopped_as_the_workers_finish_exits_zero_where_they_did(launch, tmp_path):
    """Attack 101: the store host SIGSTOPped (or cut off by the network) just as node 1's workers
    exited 0. The request that recorded their success got no reply within read_timeout, and the
    agent exited 1 although every worker had succeeded. Their success decides, as when the store
    is found gone while they run."""
    # A keep-alive interval shorter than read_timeout: the request's wait was then also taken
    # for the store's silence before it went, which decided the exit again.
    out, agents = c10d_agents(launch, tmp_path, "2:2", 2, FINISH, conf=FAST + ",read_timeout=3")
    wait_for(lambda: all(starts(out, n, lr) for n in range(2) for lr in range(2)), 15,
             what="every worker started")
    agents[0].signal(signal.SIGSTOP)
    try:
        (out / "go").touch()
        rc = agents[1].wait(AGENT_TIMEOUT)
    finally:
        agents[0].signal(signal.SIGCONT)
    assert rc == 0, outputs(agents)
    assert re.search(r"store 127\.0\.0\.1:\d+(:)? no reply within 3000 ms.*; this node's "
                     r"workers had all exited 0 by then", agents[1].stderr()), outputs(agents)


@pytest.mark.parametrize("paused", ["host", "self"])
def test_store_gone_after_a_pause_says_who_did_not_run(launch, tmp_path, paused):
    """The store host SIGSTOPped 5 s, then SIGKILLed: node 1 ran all along, blocked on the
    stopped store's replies, yet said "this agent did not run for 5 s ... may have been dropped"
    (found by an attacking helper). Time waiting for the store's replies is not absence. Node 1
    itself stopped across the host's death: that it says."""
    out, agents = c10d_agents(launch, tmp_path, "2:2", 2, FINISH)
    wait_for(lambda: all(starts(out, n, lr) for n in range(2) for lr in range(2)), 15,
             what="every worker started")
    stopped = agents[0] if paused == "host" else agents[1]
    stopped.signal(signal.SIGSTOP)
    time.sleep(5)
    agents[0].signal(signal.SIGKILL)
    if paused == "self":
        time.sleep(0.5)
        agents[1].signal(signal.SIGCONT)
    assert agents[1].wait(AGENT_TIMEOUT) == 1, outputs(agents)
    err = agents[1].stderr()
    assert re.search(r"store 127\.0\.0\.1:\d+ is gone", err), outputs(agents)
    if paused == "host":
        assert "did not run for" not in err, outputs(agents)
        assert "may have been dropped" not in err, outputs(agents)
    else:  # 5.5 s, past the keep-alive limit: node 0 took node 1 for lost before its death
        assert re.search(r"this agent did not run for [\d.]+ s \(stopped or starved\), past the "
                         r"keep-alive limit \(1\.5 s\): the other agents will have taken this "
                         r"node for lost", err), outputs(agents)


def test_sigterm_while_the_store_host_is_paused_exits_at_once(launch, tmp_path):
    conf = "join_timeout=60,read_timeout=30,keep_alive_interval=1,keep_alive_max_attempt=3"
    out, agents = c10d_agents(launch, tmp_path, "3:3", 2, FINISH, conf=conf)
    wait_for(lambda: "waiting for" in agents[1].stderr() or "joined" in agents[1].stderr(), 20,
             what="node 1 waiting in round 0")
    agents[0].signal(signal.SIGSTOP)
    try:
        time.sleep(0.5)  # node 1's next request meets the paused store (the fault's moment)
        agents[1].signal(signal.SIGTERM)
        sent = time.monotonic()
        assert agents[1].wait(40) == 128 + signal.SIGTERM, outputs(agents)
        took = time.monotonic() - sent
        assert took < 5, f"{took:.1f} s\n{outputs(agents)}"  # read_timeout is 30 s
        assert re.search(r"received SIGTERM while the rendezvous store at 127\.0\.0\.1:\d+ did "
                         r"not answer", agents[1].stderr()), outputs(agents)
    finally:
        agents[0].signal(signal.SIGCONT)
    agents[0].signal(signal.SIGTERM)
    assert agents[0].wait(20) == 128 + signal.SIGTERM, outputs(agents)


def test_a_node_joining_while_the_store_host_is_stopped_says_so_and_joins_after(launch, tmp_path):
    # Attack 72: a joining agent whose store host was stopped said nothing for up to
    # read_timeout (60 s by default).
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    args = [*sh(FINISH)]
    host = launch(c10d_args(2, 0, port, extra=args), env=node_env(out, 0))
    wait_listening(port)
    host.signal(signal.SIGSTOP)
    try:
        joiner = launch(c10d_args(2, 1, port, extra=args), env=node_env(out, 1))
        wait_for(lambda: "took this agent's connection but has not answered" in joiner.stderr(),
                 15, what="the joining agent's notice")
        assert re.search(rf"the store at 127\.0\.0\.1:{port} took this agent's connection but has "
                         r"not answered for \d+ s: the agent hosting it may be stopped",
                         joiner.stderr()), outputs([host, joiner])
    finally:
        host.signal(signal.SIGCONT)
    (out / "go").touch()
    assert joiner.wait(AGENT_TIMEOUT) == 0, outputs([host, joiner])
    assert host.wait(AGENT_TIMEOUT) == 0, outputs([host, joiner])
