"""Rank 1 finishes after 3 all-reduces while rank 0 goes on to 6: uneven steps."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
for _ in range(3 if rank == 1 else 6):
    dist.all_reduce(t)
print(f"rank {rank} done", flush=True)
