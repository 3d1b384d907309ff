"""Launcher scenario worker: checks the launcher's environment and leaves a file named after
its global rank in --touch-dir, holding that environment as JSON.

  --fail             raise RuntimeError instead (after the checks)
  --fail-attempts N  raise while TORCHELASTIC_RESTART_COUNT < N, then succeed
  --record-attempts  append this attempt's restart count to <touch-dir>/attempts.<RANK> first;
                     a failing rank then waits until every local rank has recorded it, so
                     that no rank is stopped before it could
"""
import argparse
import json
import os
import sys
import time

# What every torchrun worker gets (test_launcher_scenarios.py's docstring has the source).
REQUIRED = [
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS",
]


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--touch-dir", "--touch_dir", required=True)
    p.add_argument("--fail", action="store_true")
    p.add_argument("--fail-attempts", type=int, default=0)
    p.add_argument("--record-attempts", action="store_true")
    return p.parse_args()


def wait_for_peers(directory, restart, ranks):
    """Waits (up to 20 s) until attempts.<r> of every rank r holds restart."""
    def recorded(r):
        try:
            with open(os.path.join(directory, f"attempts.{r}")) as f:
                return str(restart) in f.read().split()
        except FileNotFoundError:
            return False
    deadline = time.monotonic() + 20
    while not all(recorded(r) for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.01)


def main():
    args = parse_args()
    env = os.environ
    missing = [name for name in REQUIRED if name not in env]
    if missing:
        sys.exit(f"rank {env.get('RANK')}: launcher did not set {missing}")
    restart = int(env["TORCHELASTIC_RESTART_COUNT"])
    if args.record_attempts:
        with open(os.path.join(args.touch_dir, "attempts." + env["RANK"]), "a") as f:
            f.write(f"{restart}\n")
        if args.fail or restart < args.fail_attempts:
            world = int(env["LOCAL_WORLD_SIZE"])
            base = int(env["RANK"]) - int(env["LOCAL_RANK"])
            wait_for_peers(args.touch_dir, restart, range(base, base + world))
    if args.fail:
        raise RuntimeError(f"rank {env['RANK']} fails as asked (--fail)")
    if restart < args.fail_attempts:
        raise RuntimeError(f"rank {env['RANK']} fails on attempt {restart}")
    seen = {name: env[name] for name in REQUIRED + ["TEST_SENTINEL_PARENT"] if name in env}
    seen["argv"] = sys.argv[1:]
    seen["__name__"] = __name__
    path = os.path.join(args.touch_dir, env["RANK"])
    with open(path + ".tmp", "w") as f:
        json.dump(seen, f)
    os.rename(path + ".tmp", path)
    print(f"rank {env['RANK']}: created {path}", flush=True)


if __name__ == "__main__":
    main()
