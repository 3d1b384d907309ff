"""A node's agent killed (SIGKILL: OOM, a node crash) and started again, with real agents on
127.0.0.x: who the rendezvous counts.

1. static, 3 nodes: node 1's agent is killed while it waits for node 2, and started again with
   the same --node_rank; node 2 then comes. The new agent takes node rank 1 once the killed one
   has sent no keep-alive for the limit, and the round forms with it (it used to fail the whole
   job: "node rank 1 was claimed twice");
2. static, 2 nodes training: node 1's agent is killed and started again at once: the job
   re-forms with the new agent, a membership change that uses no restart (--max_restarts=0);
3. c10d, 3 nodes: an agent killed while it waits is not closed into the round when a third node
   comes (it used to be, its workers awaited until its keep-alive limit ended that round); a
   fourth node fills the round, which forms once;
4. static, 2 nodes: node 1's agent stopped a little past its loss comes back to the recorded
   outcome (the store host waits the keep-alive limit for a lost node before it exits).

The kills are the faults under test; every wait for an outcome polls with a deadline.
"""

import re
import signal
import time

from conftest import sh, wait_for
from test_multinode import (AGENT_TIMEOUT, FAST, KEEP_ALIVE_LIMIT, LOOP, agent_check, c10d_args,
                            free_port, node_env, outputs, starts, static_args, stop_and_wait,
                            wait_listening, wait_world)


def static_node(launch, out, rank, port, nnodes, extra=()):
    return launch(static_args(nnodes, rank, port, conf=FAST, extra=[*extra, *sh(LOOP)]),
                  env=node_env(out, rank))


def test_static_node_killed_while_waiting_is_replaced_by_its_restarted_agent(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    host = static_node(launch, out, 0, port, 3)
    wait_listening(port)
    first = static_node(launch, out, 1, port, 3)
    wait_for(lambda: agent_check(port, "rdzv/none/r0/node/1"), 10, what="node 1 joined")
    first.signal(signal.SIGKILL)
    first.wait(10)
    again = static_node(launch, out, 1, port, 3)
    # (Should node 2 come before the new agent, the round forms with the killed one, to re-form
    # once it is lost: nothing tells the store host yet that the agent is dead.)
    wait_for(lambda: agent_check(port, "rdzv/none/r0/node/2"), 10, what="the new agent joined")
    last = static_node(launch, out, 2, port, 3)
    agents = [host, again, last]
    world = wait_world(out, [0, 1, 2], 2, 6, timeout=KEEP_ALIVE_LIMIT + 15)
    # Node rank n is the agent given --node_rank=n (GROUP_RANK), in the one round formed.
    assert all(s[4] == node for (node, _), s in world.items()), world
    assert all(len(starts(out, n, lr)) == 1 for n in range(3) for lr in range(2)), outputs(agents)
    assert stop_and_wait(out, agents) == [0, 0, 0], outputs(agents)
    assert "and was replaced by" in again.stderr(), again.output()
    assert "claimed twice" not in host.stderr(), host.output()


def test_static_node_killed_while_training_and_restarted_rejoins_without_a_restart(launch,
                                                                                   tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    host = static_node(launch, out, 0, port, 2, extra=["--max_restarts=0"])
    wait_listening(port)
    first = static_node(launch, out, 1, port, 2, extra=["--max_restarts=0"])
    wait_world(out, [0, 1], 2, 4)
    first.signal(signal.SIGKILL)
    first.wait(10)
    again = static_node(launch, out, 1, port, 2, extra=["--max_restarts=0"])
    agents = [host, again]
    # Node 0's workers start a second time, with node 1's new agent: restart count 0.
    wait_for(lambda: len(starts(out, 0, 0)) == 2 and len(starts(out, 1, 0)) == 2,
             KEEP_ALIVE_LIMIT + 15, what="the job to re-form with the new agent")
    assert all(s[2] == 0 for s in starts(out, 0, 0) + starts(out, 1, 0)), outputs(agents)
    wait_world(out, [0, 1], 2, 4)
    assert stop_and_wait(out, agents) == [0, 0], outputs(agents)
    assert "was replaced by" in again.stderr(), again.output()


def test_c10d_agent_killed_while_waiting_is_not_closed_into_the_round(launch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    agents = [launch(c10d_args("3", 0, port, extra=sh(LOOP)), env=node_env(out, 0))]
    wait_listening(port)
    agents.append(launch(c10d_args("3", 1, port, extra=sh(LOOP)), env=node_env(out, 1)))
    wait_for(lambda: agent_check(port, "rdzv/job/r0/node/1"), 10, what="node 1 joined")
    agents[1].signal(signal.SIGKILL)
    agents[1].wait(10)
    wait_for(lambda: "has sent no keep-alive" in agents[0].stderr(), KEEP_ALIVE_LIMIT + 5,
             what="the host to stop counting the killed agent")
    for n in (2, 3):
        agents.append(launch(c10d_args("3", n, port, extra=sh(LOOP)), env=node_env(out, n)))
    wait_world(out, [0, 2, 3], 2, 6)
    # One round, without the killed agent: no worker started twice.
    assert all(len(starts(out, n, lr)) == 1 for n in (0, 2, 3) for lr in range(2)), \
        outputs(agents)
    assert stop_and_wait(out, [agents[0], *agents[2:]], timeout=AGENT_TIMEOUT) == [0, 0, 0], \
        outputs(agents)


def test_static_node_paused_past_its_loss_reads_the_outcome_not_a_gone_store(launch, tmp_path):
    """The store host, failing the job for a lost node, waits the keep-alive limit for it (it
    used to wait only its 5 s failure grace): the node, stopped a little past its loss, comes
    back to the recorded root cause, its own loss, not to a gone store and its own workers'
    broken connection as the root cause."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    conf = "keep_alive_interval=3,keep_alive_max_attempt=4"  # a limit of 12 s, above the 5 s
    agents = [launch(static_args(2, n, port, conf=conf, extra=["--max_restarts=0", *sh(LOOP)]),
                     env=node_env(out, n)) for n in (0, 1)]
    wait_world(out, [0, 1], 2, 4)
    agents[1].signal(signal.SIGSTOP)
    # Lost after 12 s; the host then waits up to 12 s more (it used to give up after 5 s).
    wait_for(lambda: "the job failed: lost" in agents[0].stderr(), 20, what="the loss")
    time.sleep(8)
    agents[1].signal(signal.SIGCONT)
    rcs = [a.wait(AGENT_TIMEOUT) for a in agents]
    assert rcs == [1, 1], outputs(agents)
    err = agents[1].stderr()
    assert re.search(r"the job failed: lost .*node rank 1\)", err), outputs(agents)
    assert "is gone" not in err, outputs(agents)
