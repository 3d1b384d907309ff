"""Launcher scenario worker: both ranks of a 2-worker job raise. Local rank 1 ignores
SIGTERM (as a job that checkpoints on it) and raises 0.3 s after local rank 0, which
raises once rank 1 is ready: rank 1 fails on its own while the launcher stops the group."""
import os
import signal
import sys
import time

ready = os.path.join(sys.argv[1], "ready")
if os.environ["LOCAL_RANK"] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(ready, "w").close()
    time.sleep(0.3)
    raise RuntimeError("second failure, on rank 1")
deadline = time.monotonic() + 20
while not os.path.exists(ready) and time.monotonic() < deadline:
    time.sleep(0.01)
raise RuntimeError("first failure, on rank 0")
