"""An unmodified PyTorch DDP job on CPU (Gloo) for the hang tests and bench/pytorch_hang_bench.py:
a tiny model trained for --steps steps; with --hang-step N, rank --hang-rank sleeps forever
before step N's all_reduce, so the other ranks wait in it. --step-sleep slows every step,
--exit-sleep the finish after destroy_process_group; with --hang-at-exit, rank --hang-rank hangs in
its interpreter's teardown (a finalizer that never returns, as a stuck destructor would)."""
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def stuck_before_all_reduce():
    time.sleep(100000)


class StuckAtExit:
    """Its finalizer runs when the interpreter tears __main__ down, after the exit handlers."""

    def __del__(self, sleep=time.sleep):
        sleep(100000)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000000)
    p.add_argument("--hang-step", type=int, default=-1)
    p.add_argument("--hang-rank", type=int, default=1)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--exit-sleep", type=float, default=0.0,
                   help="seconds to sleep after destroy_process_group (a slow finish)")
    p.add_argument("--hang-at-exit", action="store_true")
    a = p.parse_args()
    dist.init_process_group(a.backend)
    rank = dist.get_rank()
    dev = torch.device("cuda", rank % torch.cuda.device_count()) if a.backend == "nccl" else "cpu"
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 2).to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(a.steps):
        loss = model(torch.randn(4, 8, device=dev)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == a.hang_step and rank == a.hang_rank:
            print(f"rank {rank} stops before all_reduce at step {step}", flush=True)
            stuck_before_all_reduce()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if step % 20 == 0:
            print(f"step {step} loss {total.item():.3f}", flush=True)
        time.sleep(a.step_sleep)
    dist.destroy_process_group()
    time.sleep(a.exit_sleep)
    if a.hang_at_exit and rank == a.hang_rank:
        print(f"rank {rank} will hang at exit", flush=True)
        globals()["_stuck"] = StuckAtExit()


if __name__ == "__main__":
    main()
