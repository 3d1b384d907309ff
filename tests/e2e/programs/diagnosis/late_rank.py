"""Rank 1 is busy (a download, data preparation) before init_process_group; rank 0's Gloo
set-up waits 3 s for it and gives up. The report names rank 1, not only the rank that failed."""
import datetime
import os
import time

import torch.distributed as dist

if os.environ["RANK"] == "1":
    time.sleep(60)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
dist.barrier()
