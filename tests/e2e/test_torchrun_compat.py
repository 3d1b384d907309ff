"""ddprun against real torchrun 2.x: same flags, same worker environment; and a
real PyTorch process group (gloo, env://) working under ddprun."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

DDPRUN = os.environ["DDPRUN"]
VENV_BIN = pathlib.Path(sys.executable).parent
TORCHRUN = VENV_BIN / "torchrun"

# Variables allowed to differ, and why.
ALLOWED = {
    "MASTER_PORT": "ddprun's one port, the rendezvous store's; torchrun's c10d opens a second "
                   "store on a port the kernel picks (checked below)",
    "MASTER_ADDR": "the rendezvous store's host (localhost under c10d/standalone); torchrun's "
                   "c10d gives rank 0's FQDN, where its second store listens (checked below)",
    "TORCHELASTIC_RUN_ID": "a fresh uuid4 in single-node c10d mode",
    "TORCHELASTIC_ERROR_FILE": "under each launcher's own temporary log directory",
    "PYTHON_EXEC": "given to ddprun so both run the same interpreter",
    "DDPRUN_HEARTBEAT_FILE": "ddprun's own variable, documented in ddprun(1)",
    "DDPRUN_TRACE_FILE": "ddprun's own variable, documented in ddprun(1)",
    "DDPRUN_DUMP_DIR": "ddprun's own variable, documented in ddprun(1)",
    "DDPRUN_PROCESS_TREE": "ddprun's own variable (containment), documented in ddprun(1)",
}

DUMP = """
import json, os, sys
with open(os.path.join(sys.argv[1], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(dict(os.environ), f)
"""


def base_env(**extra):
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    env.update(extra)
    return env


def dump_envs(launcher, flags, tmp_path, env):
    out = tmp_path / launcher[0].split("/")[-1]
    out.mkdir()
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    proc = subprocess.run([*launcher, *flags, str(script), str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {int(p.stem): json.loads(p.read_text()) for p in out.glob("*.json")}


@pytest.mark.parametrize("flags, extra_env", [
    (["--nproc_per_node=2"], {}),
    (["--standalone", "--nproc-per-node=3"], {}),
    (["--nproc_per_node=2", "--master_addr=127.0.0.1", "--master_port=29561", "--max_restarts=3",
      "--role=trainer"], {"OMP_NUM_THREADS": "4"}),
    (["--rdzv_backend=c10d", "--rdzv_endpoint=localhost:29462", "--rdzv_id=job1",
      "--nproc_per_node=2"], {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}),
    (["--nproc_per_node=2", "--virtual_local_rank"], {"CUDA_VISIBLE_DEVICES": "4,5"}),
    (["--nproc_per_node=1", "--signals_to_handle=SIGTERM,SIGUSR1"], {"CUDA_VISIBLE_DEVICES": "1"}),
])
def test_worker_environment_matches_torchrun(tmp_path, flags, extra_env):
    theirs = dump_envs([str(TORCHRUN)], flags, tmp_path, base_env(**extra_env))
    ours = dump_envs([DDPRUN], flags, tmp_path,
                     base_env(PYTHON_EXEC=sys.executable, **extra_env))
    assert sorted(theirs) == sorted(ours)
    for rank in theirs:
        names = set(theirs[rank]) | set(ours[rank])
        differ = {n: (theirs[rank].get(n), ours[rank].get(n)) for n in names
                  if theirs[rank].get(n) != ours[rank].get(n) and n not in ALLOWED}
        assert differ == {}, f"rank {rank}: (torchrun, ddprun) differ: {differ}"
        for name in ("MASTER_PORT", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RUN_ID",
                     "DDPRUN_HEARTBEAT_FILE", "DDPRUN_TRACE_FILE", "DDPRUN_DUMP_DIR",
                     "DDPRUN_PROCESS_TREE"):
            assert name in ours[rank]
        assert ours[rank]["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    ports = {env["MASTER_PORT"] for env in ours.values()}
    assert len(ports) == 1
    # The rendezvous store's port, where one was given (the others: the kernel picked it).
    given = [re.split("[:=]", f)[-1] for f in flags
             if f.startswith(("--rdzv_endpoint=", "--master_port="))]
    if given:
        assert ports == set(given)
    if any(f.startswith("--master_addr=") for f in flags):
        assert {env["MASTER_ADDR"] for env in ours.values()} == {"127.0.0.1"}


ALLREDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
os.write(1, f"rank {rank} sum {t.item():.0f}\\n".encode())  # one write: no interleaving
dist.barrier()
dist.destroy_process_group()
"""


def test_pytorch_gloo_allreduce_runs_under_ddprun(tmp_path):
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    proc = subprocess.run([DDPRUN, "--nproc_per_node=2", str(script)],
                          env=base_env(PYTHON_EXEC=sys.executable),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(l for l in proc.stdout.splitlines() if l.startswith("rank "))
    assert lines == ["rank 0 sum 3", "rank 1 sum 3"]


def test_pytorch_workers_pass_the_store_token_check(tmp_path):
    """With a job token, the workers are admitted to the one store by their agent's proof."""
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    proc = subprocess.run([DDPRUN, "--nproc_per_node=2", "--rdzv_conf=token=s3cret", str(script)],
                          env=base_env(PYTHON_EXEC=sys.executable),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(l for l in proc.stdout.splitlines() if l.startswith("rank "))
    assert lines == ["rank 0 sum 3", "rank 1 sum 3"]


ARGV = """
import json, os, sys
with open(os.environ["ARGV_OUT"], "w") as f:
    json.dump(sys.argv[1:], f)
"""


@pytest.mark.parametrize("before, after", [
    ([], ["--", "x", "--y"]),          # torchrun takes a "--" right after the script as its own
    (["--"], ["--", "x"]),             # ... but not when one came before the script
    ([], ["x", "--", "y", "$${local_rank}", "${local_rank}"]),
])
def test_program_arguments_match_torchrun(tmp_path, before, after):
    """The arguments each worker gets, around "--" and the local rank macro, are torchrun's."""
    script = tmp_path / "argv.py"
    script.write_text(ARGV)
    got = {}
    for name, launcher, env in (("torchrun", str(TORCHRUN), {}),
                                ("ddprun", DDPRUN, {"PYTHON_EXEC": sys.executable})):
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([launcher, "--nproc_per_node=1", *before, str(script), *after],
                              env=base_env(ARGV_OUT=str(out), **env), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        got[name] = json.loads(out.read_text())
    assert got["ddprun"] == got["torchrun"]
