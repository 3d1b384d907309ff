"""An NCCL process group where no GPU is visible (the tests' CUDA_VISIBLE_DEVICES is empty)."""
import torch.distributed as dist

dist.init_process_group("nccl")
