"""The shape of a chaos round's job and its fault plan (tests/chaos/chaos.py): a function of the
round's seed only, and the training time the moments are measured against."""

import random

ADDRS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
NPROC = 2
TRAIN_FLAGS = ["--device", "cpu", "--width", "64", "--depth", "2", "--batch", "16"]
RDZV_CONF = ("join_timeout=20,last_call_timeout=1,keep_alive_interval=0.5,"
             "keep_alive_max_attempt=3")
POLL = 0.02
KEEP_ALIVE_LIMIT = 0.5 * 3  # keep_alive_interval x keep_alive_max_attempt in RDZV_CONF
ORPHAN_GRACE = 5.0

# Faults a plan draws from (kind -> weight) for its first fault; a second fault is drawn from
# SECOND with probability P_SECOND.
FIRST = {"none": 2, "kill_worker": 3, "kill_agent": 3, "stop_agent": 3, "kill_host": 1.5,
         "kill_worker_mr0": 1.5}
SECOND = {"kill_worker": 1, "kill_agent": 1, "stop_agent": 1}
P_SECOND = 0.35
MOMENTS = {"startup": 1, "train": 2, "exit": 1.5}


_train_s = {}  # world size -> seconds a clean training run took (running average)


def train_estimate(steps, world):
    """Seconds from the first worker start to the first rank's end, as measured so far (2 cores:
    ~9 ms a step with 4 ranks, ~21 ms with 6)."""
    if world in _train_s:
        return _train_s[world]
    return steps * {4: 0.009, 6: 0.021}.get(world, 0.02)


def note_training(world, seconds):
    old = _train_s.get(world)
    _train_s[world] = seconds if old is None else 0.7 * old + 0.3 * seconds


def weighted(rng, table):
    keys = sorted(table)
    return rng.choices(keys, weights=[table[k] for k in keys])[0]


def make_plan(seed):
    """The round's fault plan: a function of the seed only."""
    rng = random.Random(seed)
    nagents = rng.choice([2, 3, 3])
    first = weighted(rng, FIRST)
    kinds = [first]
    if first not in ("none", "kill_worker_mr0") and rng.random() < P_SECOND:
        kinds.append(weighted(rng, SECOND))
    if first == "kill_worker_mr0":
        max_restarts = 0
    elif all(k in ("kill_agent", "stop_agent") for k in kinds):
        # Lost or paused agents must not use up restarts (e): sometimes there are none to use.
        max_restarts = rng.choice([3, 3, 1, 0])
    else:
        max_restarts = 3
    stagger = [0.0] + [round(rng.uniform(0.0, 1.2), 2) for _ in range(nagents - 1)]
    faults = []
    for kind in kinds:
        if kind == "none":
            continue
        f = {"kind": kind, "moment": weighted(rng, MOMENTS), "delay": 0.0, "pick": rng.random()}
        if f["moment"] == "startup":
            f["delay"] = round(rng.uniform(0.0, 1.5), 2)
        elif f["moment"] == "train":
            # A fraction of the training time (estimated from the run's clean rounds).
            f["frac"] = round(rng.uniform(0.05, 1.0), 2)
        elif kind.startswith("kill_worker"):
            f["delay"] = round(rng.uniform(0.0, 0.04), 2)  # the last ranks end within ~0.1 s
        else:
            f["delay"] = round(rng.uniform(0.0, 0.1), 2)  # the agents' final exit wait
        if kind == "stop_agent":
            f["target"] = rng.randrange(nagents)
            f["pause"] = round(rng.uniform(0.5, 6.0), 2)
        elif kind == "kill_agent":
            f["target"] = 1 + rng.randrange(nagents - 1)
        elif kind == "kill_host":
            f["target"] = 0
        faults.append(f)
    return {"seed": seed, "nagents": nagents, "max_restarts": max_restarts, "stagger": stagger,
            "faults": faults}


def plan_text(plan):
    parts = []
    for f in plan["faults"]:
        s = f["kind"]
        if "target" in f:
            s += f"@a{f['target']}"
        if f["kind"] == "stop_agent":
            s += f"/{f['pause']}s"
        if "frac" in f:
            s += f"[{f['moment']}@{f['frac']:.0%}]"
        else:
            s += f"[{f['moment']}+{f['delay']}]"
        parts.append(s)
    return ",".join(parts) or "none"
