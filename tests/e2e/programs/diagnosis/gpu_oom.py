"""Rank 0 asks its GPU for far more memory than it has; rank 1 waits."""
import os
import time

import torch

if os.environ["RANK"] == "0":
    total = torch.cuda.get_device_properties(0).total_memory
    torch.empty(4 * total, dtype=torch.uint8, device="cuda")
time.sleep(30)
