"""Rank 1 stops calling collectives after three all-reduces (busy elsewhere); rank 0 waits in
the fourth until the process group's 3 s timeout. The report names rank 1 where ddprun's
PyTorch hook (--hang_detect=torch) recorded the collectives."""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
if os.environ["RANK"] == "1":
    time.sleep(60)
dist.all_reduce(t)
