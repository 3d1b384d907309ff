"""Elastic jobs under pauses and races, with real agents on 127.0.0.x: the cases where agents used
to disagree (docs/elastic-invariants.md), each now decided by the one job record in the store.

1. an agent paused past the keep-alive limit comes back: every round's workers see one restart
   count (0: a membership change uses no restart), and the job ends 0 everywhere;
2. a non-host agent paused right as the workers finish: the finished job is not run again;
3. the store host paused after every worker finished: it does not evict itself, all exit 0;
   a node killed after its workers finished, before it said so: the others complete the job;
   an agent paused until the store host left, whose workers all exited 0: it exits 0 too;
   a static job's agent paused past the keep-alive limit while its workers ran on: the host
   fails the job, and the agent, back to a store gone, says its node was taken for lost (its
   workers, ending by themselves, decide its exit);
4. an agent waiting for a round acts on SIGTERM at once (exit 143, no worker started);
5. --max_restarts=0, a worker SIGKILLed after its peers on other nodes died of the broken
   connection (SIGPIPE, or exit 1 after "Connection reset by peer" in their error file or on
   their stderr): every agent exits 137 and prints the same root cause (the SIGKILL, not a
   neighbour's death);
6. an agent stopped by SIGTERM while it waits for a restart's round is not counted in it: the
   others form that round without it (it used to be counted, its workers awaited, and the round
   ended again once its keep-alive stopped);
7. a node joining after another's round keeps that round's logs; the store host waits for a
   node still stopping its failed workers.

The store host itself killed, stopped or signalled: test_store_host_lost.py.

The pauses are the faults under test (their length is the input), not waits for an event; every
wait for an outcome polls with a deadline.
"""

import os
import re
import signal
import time
from pathlib import Path

import pytest

from conftest import free_port, pid_alive, sh, wait_for
from test_multinode import (AGENT_TIMEOUT, FAST, KEEP_ALIVE_LIMIT, LOOP, c10d_args, node_env,
                            outputs, read, starts, static_args, stop_and_wait, wait_listening,
                            wait_world)

PAUSE = KEEP_ALIVE_LIMIT * 2  # well past the keep-alive limit


def c10d_agents(launch, tmp_path, nnodes, count, script, extra=(), env=None, conf=FAST):
    """`count` c10d agents (the store host first) running `script`, with `conf` as their one
    --rdzv_conf; returns (out, agents)."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    args = [*extra, *sh(script)]
    agents = [launch(c10d_args(nnodes, 0, port, conf=conf, extra=args),
                     env=node_env(out, 0, **(env or {})))]
    wait_listening(port)
    for n in range(1, count):
        agents.append(launch(c10d_args(nnodes, n, port, conf=conf, extra=args),
                             env=node_env(out, n, **(env or {}))))
    return out, agents


def test_paused_agent_comes_back_without_a_restart(launch, tmp_path):
    out, agents = c10d_agents(launch, tmp_path, "2:3", 3, LOOP)
    full = wait_world(out, [0, 1, 2], 2, 6)
    agents[2].signal(signal.SIGSTOP)
    # Lost while paused: the others re-form without it ...
    wait_world(out, [0, 1], 2, 4, timeout=KEEP_ALIVE_LIMIT + 10)
    # ... and its workers die meanwhile (as a broken collective kills them), unseen by its agent.
    for lr in range(2):
        os.kill(full[(2, lr)][0], signal.SIGKILL)
    time.sleep(0.5)
    agents[2].signal(signal.SIGCONT)
    # Back, it finds its round ended by a membership change: no restart is used, and it makes
    # the others re-form with it.
    wait_world(out, [0, 1, 2], 2, 6, timeout=AGENT_TIMEOUT)
    every = [s for n in range(3) for lr in range(2) for s in starts(out, n, lr)]
    assert all(s[2] == 0 for s in every), f"TORCHELASTIC_RESTART_COUNT differs: {every}"
    assert stop_and_wait(out, agents) == [0, 0, 0], outputs(agents)


@pytest.mark.parametrize("max_restarts", [1, 0])
def test_a_node_lost_below_the_minimum_is_waited_for_with_a_restart_left(launch, tmp_path,
                                                                         max_restarts):
    """--nnodes=2:3, node 1's agent SIGKILLed: one node remains, fewer than MIN. The job failed at
    once (found by an attacking helper); torchrun's agents restart and wait join_timeout for
    nodes. With a restart left the survivor now waits, and a node started in its place joins;
    without one the job fails at once, saying so."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    args = [f"--max_restarts={max_restarts}", *sh(LOOP)]
    agents = [launch(c10d_args("2:3", 0, port, extra=args), env=node_env(out, 0))]
    wait_listening(port)
    agents.append(launch(c10d_args("2:3", 1, port, extra=args), env=node_env(out, 1)))
    wait_world(out, [0, 1], 2, 4)
    agents[1].signal(signal.SIGKILL)
    if max_restarts == 0:
        assert agents[0].wait(AGENT_TIMEOUT) == 1, outputs(agents)
        assert "and no restart is left (--max_restarts=0) to wait for another node" in \
            agents[0].stderr(), outputs(agents)
        return
    wait_for(lambda: "waits up to join_timeout for another node" in agents[0].stderr(),
             KEEP_ALIVE_LIMIT + 10, what="node 0 waiting for another node")
    agents.append(launch(c10d_args("2:3", 2, port, extra=args), env=node_env(out, 2)))
    # One restart used (a wrong count times out here, named).
    states = wait_world(out, [0, 2], 2, 4, timeout=AGENT_TIMEOUT, restarts=1)
    assert all(s[2] == 1 for s in states.values()), states
    assert stop_and_wait(out, [agents[0], agents[2]]) == [0, 0], outputs(agents)



def test_two_nodes_killed_together_below_the_minimum_fail_the_job_at_once(launch, tmp_path):
    """--nnodes=2:3 --max_restarts=0, nodes 1 and 2 SIGKILLed together: the store host found one
    lost (their keep-alives stop a moment apart), re-formed counting the other, and waited out
    join_timeout for it, ending "round 1 timed out" (attack 85). The other is found lost before it
    rejoins: one node remains, the job fails within the keep-alive limit, naming both."""
    out, agents = c10d_agents(launch, tmp_path, "2:3", 3, LOOP, extra=["--max_restarts=0"])
    wait_world(out, [0, 1, 2], 2, 6)
    agents[1].signal(signal.SIGKILL)
    agents[2].signal(signal.SIGKILL)
    killed = time.monotonic()
    assert agents[0].wait(AGENT_TIMEOUT) == 1, outputs(agents)
    assert time.monotonic() - killed < KEEP_ALIVE_LIMIT + 8, outputs(agents)  # join_timeout: 20
    said = agents[0].stderr()
    assert "timed out" not in said, said
    # Found in one look (both named in the one line) or a poll apart (the second "before
    # rejoining"): one node remains either way, and both losses are named.
    final = [ln for ln in said.splitlines() if "the job failed: lost " in ln]
    assert final and re.search(r"no keep-alive for 1\.5 s(, before rejoining after round 0 "
                               r"ended)?; 1 node\(s\) remain, fewer than the minimum of 2 "
                               r"\(--nnodes\), and no restart is left", final[-1]), said
    assert "node rank 1)" in said and "node rank 2)" in said, said


def test_a_loss_past_the_last_restart_still_names_the_failure_that_used_it(launch, tmp_path):
    """--nnodes=2:3 --max_restarts=1: a worker's failure uses the restart, then a node is lost
    and fewer than MIN remain. The job fails of the loss, and its message used to drop the
    worker failure (found by an attacking helper: an agent paused through the restart's
    rendezvous); it names the failure that used the last restart now."""
    out, agents = c10d_agents(launch, tmp_path, "2:3", 2, LOOP, extra=["--max_restarts=1"])
    first = wait_world(out, [0, 1], 2, 4, restarts=0)
    os.kill(first[(1, 1)][0], signal.SIGKILL)
    wait_world(out, [0, 1], 2, 4, timeout=AGENT_TIMEOUT, restarts=1)
    agents[1].signal(signal.SIGKILL)
    assert agents[0].wait(AGENT_TIMEOUT) == 1, outputs(agents)
    final = [ln for ln in agents[0].stderr().splitlines() if "the job failed" in ln]
    assert final, outputs(agents)
    pid, _, _, rank, node_rank = first[(1, 1)]
    assert re.search(r"no restart is left \(--max_restarts=1\).*\(the last restart was used "
                     rf"after node {node_rank} \(.*\): rank {rank} \(local_rank 1, pid {pid}\) "
                     r".*SIGKILL", final[-1]), final[-1]



# A keep-alive limit long enough to tell waiting it out from not waiting: 2 s x 4.
SLOW_BEATS = "join_timeout=30,last_call_timeout=1,keep_alive_interval=2,keep_alive_max_attempt=4"


def test_a_signalled_store_host_does_not_wait_out_the_keep_alive_limit_for_a_lost_node(
        launch, tmp_path):
    """Node 1's agent SIGKILLed (an OOM kill; a Slurm step's task cannot come back); the store
    host declares it lost, waits for a restart's round, and gets SIGTERM (scancel). Its leave
    waited for the lost node the whole keep-alive limit (15 s by default): past a short KillWait
    Slurm SIGKILLed it, with no incident report (attack 84). After a signal it does not wait for
    lost nodes now (test_node_replaced has the wait it keeps after a failure)."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    args = ["--max_restarts=1", *sh(LOOP)]
    agents = [launch(c10d_args("2:2", 0, port, conf=SLOW_BEATS, extra=args),
                     env=node_env(out, 0))]
    wait_listening(port)
    agents.append(launch(c10d_args("2:2", 1, port, conf=SLOW_BEATS, extra=args),
                         env=node_env(out, 1)))
    wait_world(out, [0, 1], 2, 4)
    agents[1].signal(signal.SIGKILL)
    wait_for(lambda: "waits up to join_timeout for another node" in agents[0].stderr(), 8 + 10,
             what="node 0 waiting for another node")
    sent = time.monotonic()
    agents[0].signal(signal.SIGTERM)
    assert agents[0].wait(AGENT_TIMEOUT) == 143, outputs(agents)
    took = time.monotonic() - sent
    assert took < 4.5, f"the store host left {took:.1f} s after SIGTERM\n{outputs(agents)}"
    assert "incident report (JSON)" in agents[0].stderr(), outputs(agents)


# Workers that run until $OUTDIR/go exists, then record that they finished and exit 0.
FINISH = r'''
echo "$$ $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $RANK $GROUP_RANK" >> "$OUTDIR/starts_${NODE}_${LOCAL_RANK}"
while [ ! -e "$OUTDIR/go" ]; do sleep 0.05; done
echo done >> "$OUTDIR/finished_${NODE}_${LOCAL_RANK}"
exit 0
'''


def finished(out, nodes):
    return all(read(Path(out) / f"finished_{n}_{lr}") for n in nodes for lr in range(2))


def finish_while_paused(launch, tmp_path, paused):
    """Two c10d agents (2:2): agent `paused` is SIGSTOPped, every worker finishes, and the agent
    stays stopped well past the keep-alive limit before SIGCONT. Returns (out, agents, rcs)."""
    out, agents = c10d_agents(launch, tmp_path, "2:2", 2, FINISH)
    wait_for(lambda: all(starts(out, n, lr) for n in range(2) for lr in range(2)), 15,
             what="every worker started")
    agents[paused].signal(signal.SIGSTOP)
    (out / "go").touch()
    wait_for(lambda: finished(out, [0, 1]), 10, what="every worker finished")
    time.sleep(PAUSE)
    agents[paused].signal(signal.SIGCONT)
    return out, agents, [a.wait(AGENT_TIMEOUT) for a in agents]


def test_agent_paused_as_workers_finish_does_not_run_the_job_again(launch, tmp_path):
    out, agents, rcs = finish_while_paused(launch, tmp_path, paused=1)
    assert rcs == [0, 0], outputs(agents)
    for n in range(2):
        for lr in range(2):
            assert len(starts(out, n, lr)) == 1, f"the finished job ran again\n{outputs(agents)}"


def test_store_host_paused_after_workers_finished_exits_zero(launch, tmp_path):
    out, agents, rcs = finish_while_paused(launch, tmp_path, paused=0)
    assert rcs == [0, 0], outputs(agents)
    assert "lost" not in agents[0].stderr(), outputs(agents)


def test_agent_paused_until_the_store_host_left_exits_zero_when_its_workers_did(launch, tmp_path):
    """Found by an attacking helper: an agent stopped while every worker finished, and past the
    store host's exit, came back to a store that was gone and exited 1 (its peer and torchrun
    exit 0). Its workers had exited 0: that decides, and it says the store is gone."""
    out, agents = c10d_agents(launch, tmp_path, "2:3", 2, FINISH)
    wait_for(lambda: all(starts(out, n, lr) for n in range(2) for lr in range(2)), 15,
             what="every worker started")
    agents[1].signal(signal.SIGSTOP)
    (out / "go").touch()
    wait_for(lambda: finished(out, [0, 1]), 10, what="every worker finished")
    assert agents[0].wait(AGENT_TIMEOUT) == 0, outputs(agents)  # lost it; the store is gone
    agents[1].signal(signal.SIGCONT)
    assert agents[1].wait(AGENT_TIMEOUT) == 0, outputs(agents)
    assert re.search(r"store 127\.0\.0\.1:\d+ is gone .*; this node's workers had all exited 0 "
                     r"by then: the job's outcome is in the other agents' logs",
                     agents[1].stderr()), outputs(agents)
    assert all(len(starts(out, n, lr)) == 1 for n in range(2) for lr in range(2)), outputs(agents)


def test_a_static_agent_paused_past_the_limit_says_its_node_was_taken_for_lost(launch, tmp_path):
    """Attack 95: a static job's node-1 agent SIGSTOPped past the keep-alive limit while its
    workers ran on (no collectives): node 0 took the node for lost and failed the job (exit 1);
    node 1, back to a store gone, said only that it "may have been dropped". Its workers still
    decide its exit (stopping them killed healthy workers of a job the host had completed without
    the node: attack 100); what it says is that the others took the node for lost."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    agents = [launch(static_args(2, r, port, conf=FAST, extra=sh(FINISH)), env=node_env(out, r))
              for r in (0, 1)]
    wait_for(lambda: all(starts(out, n, lr) for n in range(2) for lr in range(2)), 15,
             what="every worker started")
    agents[1].signal(signal.SIGSTOP)
    assert agents[0].wait(AGENT_TIMEOUT) == 1, outputs(agents)
    assert "no keep-alive for" in agents[0].stderr(), outputs(agents)
    agents[1].signal(signal.SIGCONT)
    time.sleep(1)
    (out / "go").touch()  # node 1's workers end by themselves, within the grace
    assert agents[1].wait(AGENT_TIMEOUT) == 0, outputs(agents)
    assert finished(out, [1]), outputs(agents)
    assert re.search(r"store 127\.0\.0\.1:\d+ is gone .*past the keep-alive limit \(1\.5 s\): "
                     r"the other agents will have taken this node for lost, and the job went on "
                     r"or ended without it: its outcome is in the other agents' logs; this "
                     r"node's workers had all exited 0 by then", agents[1].stderr()), \
        outputs(agents)


def test_node_killed_after_its_workers_finished_completes_the_job(launch, tmp_path):
    out, agents = c10d_agents(launch, tmp_path, "2:2", 2, FINISH)
    wait_for(lambda: all(starts(out, n, lr) for n in range(2) for lr in range(2)), 15,
             what="every worker started")
    agents[1].signal(signal.SIGSTOP)  # so that it never says its workers finished
    (out / "go").touch()
    wait_for(lambda: finished(out, [0, 1]), 10, what="every worker finished")
    agents[1].signal(signal.SIGKILL)
    assert agents[0].wait(AGENT_TIMEOUT) == 0, outputs(agents)
    assert "the job is complete without a node: lost" in agents[0].stderr(), outputs(agents)
    assert all(len(starts(out, n, lr)) == 1 for n in range(2) for lr in range(2)), outputs(agents)


def test_a_node_killed_after_its_workers_succeeded_holds_the_host_no_longer_than_the_limit(
        launch, tmp_path):
    """Found by an attacking helper (attack 101): node 1's workers finished first, then its agent
    was SIGKILLed (a node crash) while node 0 still trained; node 0, the store host, waited 30 s
    after its own workers finished for node 1 to read the outcome. Silent past the keep-alive
    limit, an agent is dead by contract: the host leaves within a few seconds."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    script = ('if [ "$NODE" = 1 ]; then sleep 1; else sleep 4; fi; '
              'echo done >> "$OUTDIR/finished_${NODE}_${LOCAL_RANK}"')
    agents = [launch(static_args(2, r, port, conf=FAST, extra=sh(script)), env=node_env(out, r))
              for r in (0, 1)]
    wait_for(lambda: finished(out, [1]), 15, what="node 1's workers finished")
    time.sleep(0.5)
    agents[1].signal(signal.SIGKILL)
    wait_for(lambda: finished(out, [0]), 15, what="node 0's workers finished")
    done = time.monotonic()
    assert agents[0].wait(AGENT_TIMEOUT) == 0, outputs(agents)
    assert time.monotonic() - done < 10, outputs(agents)  # was 30 s


# Node 1's workers run until stopped (local rank 1 is the victim the test SIGKILLs). Every
# worker of the other nodes dies as soon as $OUTDIR/pipe exists, as a broken connection to a
# peer kills it: of SIGPIPE, or exit 1 after Gloo's message (no error file).
PEERS = r'''
echo $$ > "$OUTDIR/pid_${NODE}_${LOCAL_RANK}"
while [ ! -e "$OUTDIR/pipe" ]; do sleep 0.02; done
if [ "$NODE" = 1 ]; then
  while true; do sleep 0.1; done
fi
msg="train: rank $RANK: allreduce: Read error [127.0.0.2]:41234: Connection reset by peer"
if [ "$HOW" = error_file ]; then  # as PyTorch's @record and the DDP core write it
  printf '{"message": "%s", "timestamp": %s}' "$msg" "$(date +%s)" > "$TORCHELASTIC_ERROR_FILE"
  exit 1
fi
if [ "$HOW" = output ]; then  # said only on stderr, which ddprun reads (-t)
  echo "$msg" >&2
  exit 1
fi
kill -PIPE $$
'''


@pytest.mark.parametrize("how", ["sigpipe", "error_file", "output"])
def test_neighbours_death_is_never_the_root_cause(launch, tmp_path, how):
    out, agents = c10d_agents(launch, tmp_path, "3:3", 3, PEERS,
                              extra=["--max_restarts=0", "--tee=2"], env={"HOW": how})
    wait_for(lambda: all(read(out / f"pid_{n}_{lr}") for n in range(3) for lr in range(2)), 15,
             what="every worker started")
    victim = int(read(out / "pid_1_1"))
    (out / "pipe").touch()  # the neighbours die first, of the broken connection ...
    wait_for(lambda: not any(pid_alive(int(read(out / f"pid_{n}_{lr}")))
                             for n in (0, 2) for lr in range(2)),
             10, what="the neighbours to die")
    os.kill(victim, signal.SIGKILL)  # ... then the real failure happens
    rcs = [a.wait(AGENT_TIMEOUT) for a in agents]
    assert rcs == [137, 137, 137], outputs(agents)
    causes = set()
    for a in agents:
        found = re.findall(r"the job failed: (.*)", a.stderr())
        assert found, a.output()
        causes.add(found[-1])
    assert len(causes) == 1, causes
    assert f"pid {victim}) signal 9 (SIGKILL)" in causes.pop(), outputs(agents)
    assert "Root Cause (first observed failure)" in agents[1].stderr(), outputs(agents)


def test_sigterm_while_waiting_for_a_round_exits_at_once(launch, tmp_path):
    """An agent waiting for the other nodes acts on SIGTERM then, not when the round forms."""
    out, agents = c10d_agents(launch, tmp_path, "2:2", 1, FINISH)
    time.sleep(0.5)  # let it join round 0 and wait there (the fault's moment, not an event)
    agents[0].signal(signal.SIGTERM)
    sent = time.monotonic()
    assert agents[0].wait(10) == 128 + signal.SIGTERM, agents[0].output()
    assert time.monotonic() - sent < 2, agents[0].output()
    assert not starts(out, 0, 0), "no worker may start after the agent was told to stop"


# Node 2's workers fail in the first attempt; node 0's ignore SIGTERM, so node 0 spends its
# --shutdown_timeout stopping them while nodes 1 and 2 already wait for the restart's round.
LEAVER = r'''
echo "$$ $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $RANK $GROUP_RANK" >> "$OUTDIR/starts_${NODE}_${LOCAL_RANK}"
if [ "$NODE" = 2 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 1; exit 3; fi
if [ "$NODE" = 0 ]; then trap '' TERM; fi
while [ ! -e "$OUTDIR/stop" ]; do sleep 0.2; done
exit 0
'''


def test_sigterm_in_a_restarts_rendezvous_leaves_that_round(launch, tmp_path):
    # The last call outlasts node 0's grace: nodes 1 and 2 alone do not form round 1.
    conf = "join_timeout=20,last_call_timeout=4,keep_alive_interval=0.5,keep_alive_max_attempt=3"
    out, agents = c10d_agents(launch, tmp_path, "2:3", 3, LEAVER, conf=conf,
                              extra=["--max_restarts=1", "--shutdown_timeout=3"])
    wait_for(lambda: "worker group failed" in agents[2].stderr(), 20,
             what="node 2's workers failing")
    time.sleep(1)  # node 2 has joined round 1; node 0 still stops its workers (the fault's moment)
    agents[2].signal(signal.SIGTERM)
    assert agents[2].wait(10) == 128 + signal.SIGTERM, outputs(agents)
    wait_for(lambda: all(len(starts(out, n, lr)) >= 2 for n in (0, 1) for lr in (0, 1)), 20,
             what="round 1's workers on nodes 0 and 1")
    assert stop_and_wait(out, agents[:2]) == [0, 0], outputs(agents)
    for node in (0, 1):
        for lr in (0, 1):
            # (world size, restart count) of each start: round 0 with 3 nodes, round 1 with 2.
            seen = [(s[1], s[2]) for s in starts(out, node, lr)]
            assert seen == [(6, 0), (4, 1)], (node, lr, seen, outputs(agents))
    assert "before round 1 formed: it forms without it" in agents[0].stderr(), outputs(agents)


def test_the_logs_of_a_round_a_node_joined_after_are_kept(launch, tmp_path):
    # Attack 78: a node joining keeps the restart count, so the new round reused attempt_0 and
    # emptied it first: node 0's --redirects files of round 0, the only copy, were deleted.
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    script = ('i=0; while [ $i -lt 30 ]; do echo "world $WORLD_SIZE line $i"; i=$((i+1)); '
              'sleep 0.1; done')
    logs = [tmp_path / "logs0", tmp_path / "logs1"]

    def args(node):
        return c10d_args("1:2", node, port, nproc=1,
                         extra=["--redirects=1", f"--log_dir={logs[node]}", *sh(script)])

    first = launch(args(0), env=node_env(out, 0))
    wait_for(lambda: list(logs[0].glob("*/attempt_0/0/stdout.log")) and "world 1 line 3" in
             list(logs[0].glob("*/attempt_0/0/stdout.log"))[0].read_text(), 20,
             what="round 0's output of node 0")
    second = launch(args(1), env=node_env(out, 1))
    assert first.wait(AGENT_TIMEOUT) == 0, outputs([first, second])
    assert second.wait(AGENT_TIMEOUT) == 0, outputs([first, second])
    kept = list(logs[0].glob("*/attempt_0.round_0/0/stdout.log"))
    assert kept and "world 1 line 0" in kept[0].read_text(), list(logs[0].rglob("*"))
    now = list(logs[0].glob("*/attempt_0/0/stdout.log"))[0].read_text()
    assert "world 2 line 29" in now and "world 1" not in now, now


# Node 2's local rank 0 fails (7) in attempt 0 while its local rank 1 ignores SIGTERM (an 8 s
# grace); node 0's local rank 0 fails (5) in attempt 1, the restart nodes 0 and 1 form without it.
TWO_FAILURES = r'''
if [ "$NODE" = 2 ] && [ "$LOCAL_RANK" = 1 ]; then trap '' TERM; fi
if [ "$NODE" = 2 ] && [ "$LOCAL_RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  sleep 2; exit 7
fi
if [ "$NODE" = 0 ] && [ "$LOCAL_RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]; then
  sleep 1; exit 5
fi
sleep 30
'''


def test_the_store_host_waits_for_a_node_still_stopping_its_failed_workers(launch, tmp_path):
    """The store host left ~3 s after the job failed, not waiting for node 2, still in the grace
    of the failure recorded from it (not a member of the last round): node 2 found the store
    gone and exited 1, the others 5 (attack 82). An agent that still beats is waited for."""
    out, agents = c10d_agents(launch, tmp_path, "2:3", 3, TWO_FAILURES,
                              extra=["--max_restarts=1", "--shutdown_timeout=8"])
    rcs = [a.wait(60) for a in agents]
    assert rcs == [5, 5, 5], outputs(agents)
    for a in agents:  # the node ranks of round 1 are the order the two joined it in
        assert "is gone" not in a.stderr(), outputs(agents)
        assert re.search(r"the job failed: node [01] \(.*\): rank \d \(local_rank 0, pid \d+\) "
                         r"exit code 5", a.stderr()), outputs(agents)


# A keep_alive_interval below the coordinator's 0.2 s poll (limit 0.3 s).
SHORT_KEEP_ALIVE = "join_timeout=20,last_call_timeout=0.5,keep_alive_interval=0.1"


def test_a_keep_alive_shorter_than_the_poll_still_closes_a_round(launch, tmp_path):
    """Found by an attacking helper (attack 107): each coordinator step came more than
    keep_alive_interval after the last and was taken for a pause of the store host, which moved
    the last call on: a round with MIN nodes never closed, and join_timeout failed the job."""
    out, agents = c10d_agents(launch, tmp_path, "1:2", 1, LOOP, conf=SHORT_KEEP_ALIVE)
    wait_world(out, [0], 1, 2, timeout=10)
    assert stop_and_wait(out, agents) == [0], outputs(agents)


def test_a_keep_alive_shorter_than_the_poll_still_finds_a_killed_node(launch, tmp_path):
    """Attack 107: each step reset every member's silence clock too, so a SIGKILLed node was never
    lost and the other agent waited for it for ever."""
    out, agents = c10d_agents(launch, tmp_path, "1:2", 2, LOOP, conf=SHORT_KEEP_ALIVE)
    wait_world(out, [0, 1], 2, 4)
    agents[1].signal(signal.SIGKILL)
    wait_for(lambda: re.search(r"lost \S+ \(127\.0\.0\.2, node rank 1\): no keep-alive for 0\.3 s",
                               agents[0].stderr()), 10, what="node 1 found lost")
    wait_world(out, [0], 1, 2, timeout=AGENT_TIMEOUT)  # re-formed without it
    assert stop_and_wait(out, [agents[0]]) == [0], outputs(agents)
