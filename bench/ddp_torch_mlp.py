#!/usr/bin/env python3
"""PyTorch DDP side of bench/ddp_bench.py: the reference trainer's MLP in PyTorch.

Run under torchrun (Gloo on CPU; --device cuda: NCCL, LOCAL_RANK's GPU, TF32 off).  The model is the one examples/train builds:
Linear(32, W), ReLU, (depth-1) x [Linear(W, W), ReLU], Linear(W, 1), MSE loss,
float32, SGD (lr 0.01, no momentum), BATCH samples per rank per step.  Each
step draws its own batch inside the loop (inputs uniform in [-1, 1), targets
from a fixed 32-16-1 tanh teacher), as the C++ trainer does; the numbers
differ from the C++ trainer's, the shapes and FLOPs do not.  Every 10 steps
(and the last) the loss is all-reduced and rank 0 prints it, as train does.

With --time every rank prints, in the C++ trainer's format:
  rank R step_us t0,t1,...      wall time of every step (us, perf_counter)
  rank R maxrss_kb N            getrusage(RUSAGE_SELF).ru_maxrss
--no-comm trains the bare module (no DDP wrapper, no loss all-reduce). On CUDA each step ends
with torch.cuda.synchronize(), so a step's time is its GPU work, not its launch.
--amp bf16|fp16: forward and loss under torch.autocast of that dtype (fp32 master weights);
fp16 scales the loss with torch.amp.GradScaler, bf16 trains without one (PyTorch's practice).
"""

import argparse
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

INPUT_DIM = 32
LOSS_EVERY = 10


def build_mlp(width, depth):
    layers = []
    d_in = INPUT_DIM
    for _ in range(depth):
        layers += [nn.Linear(d_in, width), nn.ReLU()]
        d_in = width
    layers.append(nn.Linear(d_in, 1))
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--no-comm", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--amp", default=None, choices=["fp16", "bf16"])
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 GEMMs, as the C++ trainer's
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts anyway)
    model = build_mlp(args.width, args.depth).to(dev)
    net = model if args.no_comm else nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    teacher_w = torch.randn(INPUT_DIM, 16).to(dev)
    teacher_a = (torch.randn(16, 1) / 4.0).to(dev)
    gen = torch.Generator(device=dev).manual_seed(args.seed * 1000003 + rank)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.amp)
    scaler = torch.amp.GradScaler(dev.type) if args.amp == "fp16" else None

    step_us = []
    for step in range(args.steps):
        t0 = time.perf_counter_ns()
        x = torch.rand(args.batch, INPUT_DIM, generator=gen, device=dev) * 2.0 - 1.0
        with torch.no_grad():
            y = torch.tanh(x @ teacher_w) @ teacher_a
        opt.zero_grad()
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(net(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        if (step % LOSS_EVERY == 0 or step == args.steps - 1) and not args.no_comm:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                print("step %d loss %.6g" % (step, mean.item() / world), flush=True)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if cuda:
            torch.cuda.synchronize()
        step_us.append((time.perf_counter_ns() - t0) // 1000)

    ok = all(torch.isfinite(p).all().item() for p in model.parameters())
    text = "rank %d finite %d\n" % (rank, int(ok))
    if args.time:
        text = "rank %d step_us %s\nrank %d maxrss_kb %d\n" % (
            rank, ",".join(str(v) for v in step_us), rank,
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) + text
    sys.stdout.flush()
    os.write(1, text.encode())  # one write: the ranks share the launcher's stdout
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
