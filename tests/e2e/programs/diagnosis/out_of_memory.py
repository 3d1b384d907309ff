"""Rank 1 fills more memory than the job's memory cgroup allows (the test limits it); rank 0 waits.
The kernel's OOM killer ends rank 1 with SIGKILL."""
import os
import time

if os.environ["RANK"] == "1":
    filled = b"\x01" * (int(os.environ["FILL_MIB"]) << 20)  # touches every page
time.sleep(60)
