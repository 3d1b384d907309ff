"""A training loop that stops when its loss turns nan (at step 3), as training scripts do."""
import math

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    loss = model(torch.ones(8, 4)).pow(2).mean() * (float("nan") if step == 3 else 1.0)
    if not math.isfinite(loss.item()):
        raise RuntimeError(f"Loss is {loss.item()}, stopping training at step {step}")
    opt.zero_grad()
    loss.backward()
    opt.step()
