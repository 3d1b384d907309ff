#!/usr/bin/env python3
"""Store request parsing cost: server CPU per byte for one large request, by size.

Starts build/tests/store_host (no token) and sends, on one connection, a MULTI_SET of
SIZE MiB made of 512-byte key/value pairs, in 64 KiB writes, then a PING; the PING's echo
says the server is done. The server's CPU time (utime + stime of /proc/PID/stat) across
the request is its parsing and storing cost.

Parsing is linear when CPU per byte does not grow with the size: each row's ratio is its
ns/byte over the reference row's (the smallest size). The goal is a ratio <= 3 for every
size; a quadratic parser (each read re-parsing the request from its start) gives ratios that
grow with the size (x16 per x4 of size).

  python bench/store_parse_bench.py [--store-host PATH] [--sizes 4,16,64] [--runs 3]

Exits non-zero on FAILED (a goal missed or a check failed).
"""
import argparse
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAGIC = 0x3C85F7CE
PAIR = 512  # bytes per key/value pair on the wire
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def multi_set(mib):
    """A MULTI_SET of `mib` MiB: 8-byte count, then pairs of u64 length + bytes."""
    n = mib * 1024 * 1024 // PAIR
    key_len = 256 - 8
    value_len = PAIR - 256 - 8
    pairs = []
    for i in range(n):
        key = b"/k%08d" % i
        key = key + b"k" * (key_len - len(key))
        pairs.append(struct.pack("<Q", key_len) + key + struct.pack("<Q", value_len)
                     + b"v" * value_len)
    return b"\x0b" + struct.pack("<q", n) + b"".join(pairs)


def one_run(port, pid, request):
    sock = socket.create_connection(("127.0.0.1", port), timeout=600)
    sock.sendall(b"\x00" + struct.pack("<I", MAGIC))
    before = cpu_seconds(pid)
    start = time.monotonic()
    view = memoryview(request)
    for off in range(0, len(view), 65536):
        sock.sendall(view[off:off + 65536])
    sock.sendall(b"\x0d" + struct.pack("<I", 77))
    echo = b""
    while len(echo) < 4:
        chunk = sock.recv(4 - len(echo))
        if not chunk:
            raise RuntimeError("the store closed the connection")
        echo += chunk
    wall = time.monotonic() - start
    cpu = cpu_seconds(pid) - before
    sock.close()
    if struct.unpack("<I", echo)[0] != 77:
        raise RuntimeError("wrong PING echo")
    return cpu, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store-host", default=os.path.join(ROOT, "build/tests/store_host"))
    ap.add_argument("--sizes", default="4,16,64", help="request sizes in MiB; the first is "
                    "the reference")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]

    proc = subprocess.Popen([a.store_host, "127.0.0.1", "0"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("port "):
        sys.exit(f"store_host did not start: {line!r}")
    port = int(line.split()[1])
    failures = []
    rows = []
    try:
        for mib in sizes:
            request = multi_set(mib)
            cpus, walls = [], []
            for _ in range(a.runs):
                try:
                    cpu, wall = one_run(port, proc.pid, request)
                except (OSError, RuntimeError) as e:
                    failures.append(f"{mib} MiB: {e}")
                    break
                cpus.append(cpu)
                walls.append(wall)
            if cpus:
                rows.append((mib, len(request), statistics.median(cpus), statistics.median(walls)))
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)

    print("# store_parse_bench: one MULTI_SET of SIZE MiB (512-byte pairs) on one connection, "
          "64 KiB writes; server CPU from /proc")
    print(f"# host {platform.node()}  cpus {os.cpu_count()}  kernel {platform.release()}  "
          f"store_host {a.store_host}")
    print(f"# median of {a.runs} runs; reference row: {sizes[0]} MiB; goal: ratio <= 3")
    print("#")
    print(f"#{'size':>8} {'bytes':>11} {'cpu':>9} {'wall':>9} {'cpu/byte':>10} {'ratio':>7} "
          f"{'status':>7}")
    print(f"#{'MiB':>8} {'':>11} {'s':>9} {'s':>9} {'ns':>10} {'':>7} {'':>7}")
    ref = None
    for mib, nbytes, cpu, wall in rows:
        per_byte = cpu * 1e9 / nbytes
        ref = ref or max(per_byte, 1e-9)
        # CPU time is counted in ticks (10 ms): a row under 2 ticks cannot fail the ratio.
        ratio = per_byte / ref
        ok = ratio <= 3 or cpu < 2.0 / TICK
        if not ok:
            failures.append(f"{mib} MiB: cpu/byte {ratio:.1f}x the reference")
        print(f" {mib:>8} {nbytes:>11} {cpu:>9.3f} {wall:>9.3f} {per_byte:>10.2f} {ratio:>7.2f} "
              f"{'ok' if ok else 'FAIL':>7}")
    print("#")
    for f in failures:
        print(f"# FAILURE: {f}")
    print("# " + ("FAILED" if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
