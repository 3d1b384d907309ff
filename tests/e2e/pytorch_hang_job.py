"""An unmodified PyTorch DDP job on CPU (Gloo) for the hang tests and bench/pytorch_hang_bench.py:
a tiny model trained for --steps steps; with --hang-step N, rank --hang-rank sleeps forever
before step N's all_reduce, so the other ranks wait in it. --step-sleep slows every step,
--exit-sleep the finish after destroy_process_group; --again N trains N more steps in a process group
made again after that. With --hang-after-destroy rank --hang-rank sleeps forever after its last
destroy_process_group; with --hang-at-exit it hangs in its interpreter's teardown (a finalizer that
never returns, as a stuck destructor would), with --abort-at-exit it aborts there (a destructor that
crashes), and --raise-at-end raises after the last destroy_process_group, --abort-in-again aborts as
the process group made again (--again) is made; with --forgotten-thread it starts a thread that never
ends and is not a daemon (the interpreter joins it at exit). --no-destroy leaves the process group
undestroyed, as many scripts do. With --subgroup ranks 0 and 1 also all_reduce in a process group of
their own after each step (and once in a group destroyed at once), and the hang rank stops before
that one instead."""
import argparse
import os
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def stuck_before_all_reduce():
    time.sleep(100000)


def stuck_after_destroy():
    time.sleep(100000)


class StuckAtExit:
    """Its finalizer runs when the interpreter tears __main__ down, after the exit handlers."""

    def __del__(self, sleep=time.sleep):
        sleep(100000)


class AbortAtExit:
    """Its finalizer aborts the process as the interpreter tears __main__ down, a second in: the
    other ranks have finished by then (a crash at exit while one still works is restarted)."""

    def __del__(self, abort=os.abort, sleep=time.sleep):
        sleep(1)
        abort()


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
    p.add_argument("--abort-at-exit", action="store_true")
    p.add_argument("--raise-at-end", action="store_true")
    p.add_argument("--abort-in-again", action="store_true")
    p.add_argument("--hang-after-destroy", action="store_true",
                   help="rank --hang-rank sleeps forever after destroy_process_group")
    p.add_argument("--forgotten-thread", action="store_true",
                   help="rank --hang-rank starts a non-daemon thread that never ends")
    p.add_argument("--no-destroy", action="store_true")
    p.add_argument("--subgroup", action="store_true",
                   help="ranks 0,1 all_reduce in a group of their own after each step")
    p.add_argument("--again", type=int, default=0,
                   help="then a process group again for this many more steps")
    a = p.parse_args()
    train(a, a.steps, dist.init_process_group)
    if a.again:
        train(a, a.again, init_again)
    rank = int(os.environ["RANK"])
    if a.hang_after_destroy and rank == a.hang_rank:
        print(f"rank {rank} hangs after destroy_process_group", flush=True)
        stuck_after_destroy()
    if a.hang_at_exit and rank == a.hang_rank:
        print(f"rank {rank} will hang at exit", flush=True)
        globals()["_stuck"] = StuckAtExit()
    if a.abort_at_exit and rank == a.hang_rank:
        print(f"rank {rank} will abort at exit", flush=True)
        globals()["_crash"] = AbortAtExit()
    if a.raise_at_end and rank == a.hang_rank:
        raise RuntimeError(f"rank {rank} failed after its last destroy_process_group")
    if a.forgotten_thread and rank == a.hang_rank:
        print(f"rank {rank} leaves a thread running", flush=True)
        threading.Thread(target=time.sleep, args=(100000,), name="forgotten").start()


def init_again(backend):
    """A process group again, its keys under a prefix of their own: the first group's are still in
    the job's store, and Gloo's rendezvous would read them (stale addresses) for the new one."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False)
    dist.init_process_group(backend, store=dist.PrefixStore("again/", store),
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def train(a, steps, init):
    init(a.backend)
    rank = dist.get_rank()
    if init is init_again and a.abort_in_again and rank == a.hang_rank:
        print(f"rank {rank} aborts in its second process group", flush=True)
        os.abort()
    dev = torch.device("cuda", rank % torch.cuda.device_count()) if a.backend == "nccl" else "cpu"
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 2).to(dev))
    pair = dist.new_group([0, 1]) if a.subgroup else None
    if a.subgroup:  # a group used and destroyed at once: its records outlive it
        once = dist.new_group([0, 1])
        if rank in (0, 1):
            dist.all_reduce(torch.ones(1), group=once)
        dist.destroy_process_group(once)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        loss = model(torch.randn(4, 8, device=dev)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == a.hang_step and rank == a.hang_rank and not a.subgroup:
            print(f"rank {rank} stops before all_reduce at step {step}", flush=True)
            stuck_before_all_reduce()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if pair is not None and rank in (0, 1):
            if step == a.hang_step and rank == a.hang_rank:
                print(f"rank {rank} stops before its group's all_reduce at step {step}", flush=True)
                stuck_before_all_reduce()
            dist.all_reduce(total.clone(), group=pair)
        if step % 20 == 0:
            print(f"step {step} loss {total.item():.3f}", flush=True)
        time.sleep(a.step_sleep)
    if not a.no_destroy:
        dist.destroy_process_group()
    time.sleep(a.exit_sleep)


if __name__ == "__main__":
    main()
