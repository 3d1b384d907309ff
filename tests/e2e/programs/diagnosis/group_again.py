"""A process group made again after destroy_process_group, rank 0 late: rank 1's Gloo reads rank
0's address of the first group from the store, which PyTorch leaves there. Of two Gloo ranks the
one with the larger address connects to the other, so rank 0 binds lo (127.0.0.1) and rank 1 an
interface whose IPv4 address sorts above it: rank 1 then always connects to that stale address
and is refused. `group_again.py --interfaces` prints the pair ("lo,eth0"), or nothing when this
host has no such interface."""
import fcntl
import os
import socket
import struct
import sys
import time

SIOCGIFADDR = 0x8915


def ipv4_of(name):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return packed[20:24]


def interfaces():
    loopback = socket.inet_aton("127.0.0.1")
    for _, name in socket.if_nameindex():
        address = ipv4_of(name)
        if name != "lo" and address is not None and address > loopback:
            return ["lo", name]
    return None


if sys.argv[1:] == ["--interfaces"]:
    print(",".join(interfaces() or []))
    sys.exit(0)

import torch  # noqa: E402 (not needed by --interfaces)
import torch.distributed as dist  # noqa: E402

rank = int(os.environ["RANK"])
os.environ["GLOO_SOCKET_IFNAME"] = interfaces()[rank]
for attempt in range(2):
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()
    if rank == 0:
        time.sleep(2)
