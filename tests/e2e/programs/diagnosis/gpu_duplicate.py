"""Every rank on cuda:0 (no set_device by LOCAL_RANK): NCCL refuses two ranks on one GPU."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(0)
dist.all_reduce(torch.ones(1, device="cuda"))
