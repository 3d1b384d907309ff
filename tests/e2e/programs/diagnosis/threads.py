"""Starts threads until the system refuses one (RLIMIT_NPROC)."""
import threading
import time

threads = []
for _ in range(10000):
    t = threading.Thread(target=time.sleep, args=(30,), daemon=True)
    t.start()
    threads.append(t)
