"""An agent's wait for the rendezvous store at its start (found by an attacking helper, attack
101): a store not up yet is said after 5 s and then every 30 s (a static node started before node
0 was silent for up to its 900 s join timeout); a listener that takes the connection and never
answers is given up on after the read timeout, as the warning says, not the join timeout."""
import socket
import time

from conftest import free_port, sh
from test_multinode import AGENT_TIMEOUT, static_args


def test_a_store_not_up_yet_is_said_while_the_agent_waits(launch):
    port = free_port()
    agent = launch(static_args(2, 1, port, conf="timeout=40", extra=sh("exit 0")))
    deadline = time.monotonic() + 15
    said = f"the rendezvous store at 127.0.0.1:{port} is not up yet (nothing listens there) after"
    while said not in agent.stderr() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert said in agent.stderr(), agent.output()
    assert "its host (node rank 0, or the c10d endpoint's agent) has not started" \
        in agent.stderr(), agent.output()
    host = launch(static_args(2, 0, port, conf="timeout=40", extra=sh("exit 0")))
    assert [agent.wait(AGENT_TIMEOUT), host.wait(AGENT_TIMEOUT)] == [0, 0], agent.output()


def test_a_listener_that_never_answers_is_given_up_on_after_the_read_timeout(launch):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        agent = launch(static_args(2, 1, port, conf="timeout=60,read_timeout=2",
                                   extra=sh("exit 0")))
        assert agent.wait(AGENT_TIMEOUT) == 1, agent.output()
        took = time.monotonic() - started
    assert took < 15, f"{took:.1f} s\n{agent.output()}"  # it waited the 60 s join timeout
    assert (f"store 127.0.0.1:{port} took the connection but did not answer within 2000 ms "
            "(the process listening there is stopped, hung, or not a ddprun store)"
            in agent.stderr()), agent.output()
    assert "how long an agent waits for the store at its start" not in agent.stderr()
