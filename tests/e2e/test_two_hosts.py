"""Two hosts on one machine: two network namespaces joined by a veth pair (eth7 on both,
10.77.N.1 and 10.77.N.2), each agent in its own UTS and mount namespace with a host name of
its own and its own /etc/hosts, as Debian writes it: "127.0.1.1 HOSTNAME".

That mapping is the classic multi-node Gloo failure: PyTorch's Gloo, with GLOO_SOCKET_IFNAME
unset, tells its peers the address its host name resolves to, loopback, and a rank on the
other host is refused. ddprun warns at start on such a host and explains the failure.
Root only (network namespaces); skipped with the reason otherwise.
"""
import os
import re
import shutil
import subprocess

import pytest

from conftest import DDPRUN, PYTHON, base_env

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "diagnosis", "gloo_two_hosts.py")


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


@pytest.fixture
def two_hosts(tmp_path):
    """Yields run(env) -> [(rc, stdout, stderr) of host a, of host b]; removes the namespaces."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        pytest.skip("needs root, ip(8) and unshare(1) for network namespaces")
    tag = str(os.getpid() % 200 + 20)
    ns = [f"ddprun-a{tag}", f"ddprun-b{tag}"]
    subnet = f"10.77.{tag}"
    made = sh("ip", "netns", "add", ns[0])
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    try:
        steps = [["ip", "netns", "add", ns[1]],
                 ["ip", "link", "add", "eth7", "netns", ns[0], "type", "veth", "peer", "name",
                  "eth7", "netns", ns[1]]]
        for i, n in enumerate(ns):
            steps += [["ip", "-n", n, "addr", "add", f"{subnet}.{i + 1}/24", "dev", "eth7"],
                      ["ip", "-n", n, "link", "set", "eth7", "up"],
                      ["ip", "-n", n, "link", "set", "lo", "up"]]
        for step in steps:
            r = sh(*step)
            if r.returncode != 0:
                pytest.skip(f"{' '.join(step)} failed: {r.stderr.strip()}")
        names = ["hosta", "hostb"]
        for i, name in enumerate(names):
            other = 1 - i
            (tmp_path / f"hosts.{name}").write_text(
                f"127.0.0.1 localhost\n127.0.1.1 {name}\n{subnet}.{other + 1} {names[other]}\n")

        def run(env):
            procs = []
            for i, name in enumerate(names):
                inner = (f"hostname {name} && mount --bind {tmp_path}/hosts.{name} /etc/hosts && "
                         f"exec {DDPRUN} --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d "
                         f"--rdzv_endpoint={subnet}.1:29400 --rdzv_id=two-hosts "
                         f"--max_restarts=0 {PROGRAM}")
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", ns[i], "unshare", "--uts", "--mount", "sh", "-c",
                     inner], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, errors="replace"))
            out = []
            for p in procs:
                try:
                    o, e = p.communicate(timeout=90)
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    pytest.fail("the two-host job did not finish within 90 s")
                out.append((p.returncode, o, e))
            return out

        yield run
    finally:
        for n in ns:
            sh("ip", "netns", "del", n)


def test_a_host_name_mapped_to_loopback_is_warned_about_and_the_gloo_failure_explained(two_hosts):
    results = two_hosts(base_env(OMP_NUM_THREADS="1", PYTHON_EXEC=PYTHON))
    for name, (rc, out, err) in zip(["hosta", "hostb"], results):
        assert rc == 1, (name, err)
        assert re.search(rf"warning\] Gloo's address: host name {name} resolves to 127\.0\.1\.1, "
                         r"a loopback address: PyTorch's Gloo, with GLOO_SOCKET_IFNAME unset, "
                         r"tells the other ranks to connect there.*; fix: export "
                         r"GLOO_SOCKET_IFNAME=eth7 on every node", err), (name, err)
    report = "".join(err for _, _, err in results)
    assert "remote=[127.0.1.1]" in report or "connect [127.0.1.1]" in report, report
    assert re.search(r"cause +: a rank's Gloo could not connect to a peer at 127\.0\.1\.1, a "
                     r"loopback address: with GLOO_SOCKET_IFNAME unset", report), report
    assert re.search(r"fix +: export GLOO_SOCKET_IFNAME .*; here: eth7;", report), report


def test_gloo_socket_ifname_makes_the_same_two_host_job_work(two_hosts):
    results = two_hosts(base_env(OMP_NUM_THREADS="1", PYTHON_EXEC=PYTHON,
                                 GLOO_SOCKET_IFNAME="eth7"))
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, err
        assert f"rank {rank} sum [3.0, 3.0, 3.0, 3.0]" in out, (out, err)
        assert "Gloo's address" not in err, err
