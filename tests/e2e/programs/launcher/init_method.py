"""Launcher scenario worker: a gloo process group through --init-method (env:// or
tcp://HOST:PORT); an all_reduce of one-hot vectors must add up to the world size. Leaves
<--touch-dir>/<rank> on success."""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init-method", required=True)
    p.add_argument("--touch-dir", required=True)
    args = p.parse_args()
    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method=args.init_method, world_size=world, rank=rank)
    assert (dist.get_rank(), dist.get_world_size()) == (rank, world)
    t = torch.nn.functional.one_hot(torch.tensor(rank), num_classes=world)
    dist.all_reduce(t)
    if int(t.sum()) != world:
        raise RuntimeError(f"all_reduce gave {t.tolist()}, expected {world} ones")
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(args.touch_dir, str(rank)), "w").close()


if __name__ == "__main__":
    main()
