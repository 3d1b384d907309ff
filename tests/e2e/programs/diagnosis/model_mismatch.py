"""Ranks that build different models: rank 1's first layer is wider."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 4 + rank), torch.nn.Linear(4, 1)))
