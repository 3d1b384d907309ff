"""Rank 1 crashes in native code (a read of address 0 through ctypes); rank 0 waits."""
import ctypes
import os
import time


def crash():
    ctypes.string_at(0)


if os.environ["RANK"] == "1":
    crash()
time.sleep(60)
