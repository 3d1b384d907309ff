"""Launcher scenario worker (after PyTorch's zombie test): local rank 0 starts a child
process, writes "<its pid> <child pid>" to <out-dir>/pids and sleeps; local rank 1 waits
for that file and exits 1. The launcher must then stop rank 0 and its child."""
import os
import subprocess
import sys
import time

out_dir = sys.argv[1]
pids = os.path.join(out_dir, "pids")
if os.environ["LOCAL_RANK"] == "0":
    child = subprocess.Popen(["sleep", "60"])
    with open(pids + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}\n")
    os.rename(pids + ".tmp", pids)
    time.sleep(60)
else:
    deadline = time.monotonic() + 20
    while not os.path.exists(pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    sys.exit(1)
