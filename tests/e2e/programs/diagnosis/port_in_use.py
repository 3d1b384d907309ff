"""Rank 0 starts a TCPStore on HELD_PORT, a port the test holds."""
import os

import torch.distributed as dist

dist.TCPStore("127.0.0.1", int(os.environ["HELD_PORT"]), int(os.environ["WORLD_SIZE"]),
              os.environ["RANK"] == "0", wait_for_workers=False)
