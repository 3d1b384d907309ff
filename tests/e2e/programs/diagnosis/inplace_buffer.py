"""A model whose forward edits, in place, a buffer that autograd saved for backward."""
import torch
import torch.distributed as dist
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        y = self.lin(x) * self.scale
        self.scale.mul_(0.9)
        return y


dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(Net())
model(torch.ones(2, 4)).sum().backward()
