"""Launcher scenario worker: reads one line of stdin and writes what it got ("line TEXT", or
"EOF") to <argv[1]>/<RANK>. With --pread it reads from offset 0 of a regular file without
moving the shared offset, so that every rank given that file sees all of it."""
import os
import sys

if "--pread" in sys.argv:
    data = os.pread(0, 4096, 0).decode()
    got = "line " + data.splitlines()[0] if data else "EOF"
else:
    try:
        got = "line " + input()
    except EOFError:
        got = "EOF"
with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as f:
    f.write(got)
