"""A worker for the Slurm tests and benchmark (stdlib only): python slurm_worker.py MODE DIR.

Every mode first installs its signal handlers, then writes DIR/pid_<RANK> ("<pid>\\n"). It
appends each SIGUSR1/SIGUSR2 (and in mode ckpt, SIGTERM) it gets to DIR/sig_<RANK>
("<NAME> <unix time>"); in the other modes SIGTERM kills it.
RANK is the worker's global rank (RANK, else SLURM_PROCID, else 0).

  ckpt     wait for SIGTERM; then write DIR/ckpt_<RANK> for 2 s (20 chunks of 0.1 s into a
           .tmp file, renamed when whole) and exit 0. Later SIGTERMs are only logged.
  usr1     wait for SIGUSR1 (at most 60 s), log further copies for 1 s; then exit 0 (1 on the
           deadline).
  fail     on group rank 1, local rank 0: exit 7 after 0.5 s; everyone else sleeps 60 s.
  restart  if SLURM_RESTART_COUNT is 0 or unset: sleep 120 s; else exit 0.
  env      write DIR/env_<RANK>: SLURM_PROCID SLURM_LOCALID SLURM_NTASKS RANK LOCAL_RANK
           WORLD_SIZE; exit 0.
  sleep    write DIR/running_<RANK> ("<unix time at start>\\n") and sleep 120 s (the
           benchmark's worker; SIGTERM kills it).
"""

import os
import signal
import sys
import time


def rank():
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def write_whole(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class Worker:
    def __init__(self, out):
        self.out = out
        self.rank = rank()
        self.got = []
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, self.on_signal)

    def catch_term(self):
        signal.signal(signal.SIGTERM, self.on_signal)

    def on_signal(self, sig, frame):
        name = signal.Signals(sig).name
        self.got.append(name)
        with open(os.path.join(self.out, f"sig_{self.rank}"), "a") as f:
            f.write(f"{name} {time.time():.3f}\n")

    def started(self):
        write_whole(os.path.join(self.out, f"pid_{self.rank}"), f"{os.getpid()}\n")

    def wait_for(self, name, seconds):
        deadline = time.monotonic() + seconds
        while name not in self.got and time.monotonic() < deadline:
            time.sleep(0.02)
        return name in self.got

    def checkpoint(self):
        path = os.path.join(self.out, f"ckpt_{self.rank}")
        with open(f"{path}.tmp", "w") as f:
            for chunk in range(20):
                f.write(f"chunk {chunk}\n")
                f.flush()
                time.sleep(0.1)
            f.write("complete\n")
        os.rename(f"{path}.tmp", path)


def main():
    started = time.time()
    mode, out = sys.argv[1], sys.argv[2]
    w = Worker(out)
    if mode == "ckpt":
        w.catch_term()
    if mode == "sleep":
        write_whole(os.path.join(out, f"running_{w.rank}"), f"{started:.6f}\n")
    w.started()
    if mode == "ckpt":
        if not w.wait_for("SIGTERM", 300):
            return 1
        w.checkpoint()
        return 0
    if mode == "usr1":
        got = w.wait_for("SIGUSR1", 60)
        # A second copy (slurmstepd signals every process of a step; ddprun must not forward
        # another) would arrive within a few ms: log any for a second, then stop listening
        # (Python restores SIG_DFL for its handlers at exit; a late copy must not kill it).
        time.sleep(1.0)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        return 0 if got else 1
    if mode == "fail":
        if os.environ.get("GROUP_RANK") == "1" and os.environ.get("LOCAL_RANK") == "0":
            time.sleep(0.5)
            return 7
        time.sleep(60)
        return 0
    if mode == "restart":
        if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
            time.sleep(120)
        return 0
    if mode == "env":
        keys = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "RANK", "LOCAL_RANK",
                "WORLD_SIZE")
        write_whole(os.path.join(out, f"env_{w.rank}"),
                    " ".join(os.environ.get(k, "-") for k in keys) + "\n")
        return 0
    if mode == "sleep":
        time.sleep(120)
        return 0
    print(f"slurm_worker: unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
