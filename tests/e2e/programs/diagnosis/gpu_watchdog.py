"""NCCL with a 5 s process-group timeout; rank 1 skips the second all_reduce and sleeps: rank 0's
watchdog times the collective out (run with ddprun's hang detection off)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=5))
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
if dist.get_rank() == 1:
    time.sleep(60)
dist.all_reduce(t)
torch.cuda.synchronize()
time.sleep(60)
