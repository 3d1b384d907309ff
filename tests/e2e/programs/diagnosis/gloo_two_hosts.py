"""One Gloo all-reduce across the job's nodes; each rank prints the sum (tests/e2e/test_two_hosts.py)."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} sum {t.tolist()}", flush=True)
dist.destroy_process_group()
