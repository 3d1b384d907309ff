"""The DDP core with float32, float16 and bfloat16 parameters on the real Gloo group: every
rank ends each step with the mean gradient in the parameter's own type, 16-bit gradients are
reduced in 16-bit buckets (divided by the world size before the sum, so a float16 sum that would
overflow does not), with gradients as bucket views or copied."""
import os
import re
import subprocess
from pathlib import Path

import pytest

DDPRUN = os.environ["DDPRUN"]
WORKER = str(Path(os.environ["DDPRUN_BUILD"]) / "tests" / "mixed_dtype_worker")


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("flags", [[], ["--views"], ["--views", "--small-buckets"]])
def test_mixed_dtypes_average_on_every_rank(world, flags):
    r = subprocess.run([DDPRUN, f"--nproc_per_node={world}", "--shutdown_timeout=5", WORKER,
                        *flags], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(re.findall(r"rank (\d+) ok", r.stdout)) == [str(i) for i in range(world)]
    types = re.search(r"buckets (\S+)", r.stdout).group(1).split(",")
    assert set(types) == {"float32", "float16", "bfloat16"}, types
    if "--small-buckets" in flags:
        assert len(types) > 3, types  # several buckets of one type
