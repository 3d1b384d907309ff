"""Launcher scenario worker: the local rank from the environment (LOCAL_RANK, torchrun's and
--use-env's way) and, when given, from --local-rank / --local_rank (the legacy launcher's
argument, or torchrun's ${local_rank} macro) must agree. Writes <--out-dir>/<RANK> as
"<LOCAL_RANK> <argument or None>"."""
import argparse
import os


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out-dir", required=True)
    p.add_argument("--local-rank", "--local_rank", default=None)
    args = p.parse_args()
    env_rank = os.environ["LOCAL_RANK"]
    with open(os.path.join(args.out_dir, os.environ["RANK"]), "w") as f:
        f.write(f"{env_rank} {args.local_rank}")
    if args.local_rank is not None and args.local_rank != env_rank:
        raise SystemExit(f"--local-rank={args.local_rank} but LOCAL_RANK={env_rank}")


if __name__ == "__main__":
    main()
