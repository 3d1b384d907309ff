"""An MLP with a branch its forward never uses, under DDP without find_unused_parameters:
the second iteration fails in DDP's reducer."""
import torch
import torch.distributed as dist
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x)


dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(Net())
for _ in range(2):
    model(torch.ones(2, 4)).sum().backward()
