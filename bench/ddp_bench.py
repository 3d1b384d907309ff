#!/usr/bin/env python3
"""DDP step time and overlap benchmark: ddprun + examples/train vs PyTorch DDP.

Prints an nccl-tests style report: a '#' header with the parameters, one row
per measurement (median over --runs runs, units, ddprun/pytorch ratio where
there is one, goal, status), min/max over runs, and a footer ending in OK or
FAILED.  The exit status is non-zero on FAILED (a goal missed or a run that
failed or gave a wrong result).

Measurements (CPU, Gloo, 2 ranks, OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
  step     The same MLP (32 -> W x D, ReLU -> 1, MSE, fp32, SGD lr 0.01) and
           per-rank batch, trained --steps steps by
             ddprun --standalone --nproc_per_node=2 --no_python train --time
             torchrun --standalone --nproc_per_node=2 ddp_torch_mlp.py --time
           (PyTorch: DistributedDataParallel, Gloo, torch.set_num_threads(1)).
           Each rank times every step of its own training loop (wall clock,
           start-up excluded) and prints the times and its ru_maxrss.  Per
           run: the median step time of each rank after --warmup steps, and
           the run's value is the MAX over the ranks (a synchronous job goes at
           its slowest rank's pace); rank 0's value is shown in the spread
           lines.  peak_rss: each rank's getrusage(RUSAGE_SELF).ru_maxrss, max
           over ranks (PyTorch's includes the interpreter and libtorch).
           Runs alternate ddprun / torchrun so background load hits both.
  overlap  ddprun + train only, on a model sized so that the gradient
           all-reduce takes about as long as backward (--ov-*):
             t_ddp        train                 (normal DDP steps)
             t_nocomm     train --no-comm       (same compute, 2 ranks, no
                                                 collectives at all)
             t_comm       train --comm-only     (the step's collectives --
                                                 buffer broadcast, the same
                                                 gradient buckets through the
                                                 reducer, the loss every 10
                                                 steps -- with no compute)
             backward     train --no-comm's backward time per step (compute
                          only), printed to compare with t_comm
           hidden = 1 - (t_ddp - t_nocomm) / t_comm, from the medians.
           All three run with 2 ranks on the same 2 cores, so t_nocomm
           already includes the two ranks competing for CPU.
  gpu      Unscale kernel bandwidth: not run by this script (scripts/gpu-check.sh
           runs unscale_bench).

--device cuda: the same side by side on the GPU (NCCL; --nproc ranks, default 1; TF32 off on
both sides, PyTorch synchronises at the end of each step); several ranks on one GPU run through
tests/tools/onehost (root). Time per step is then the mean over the timed steps (launches are
asynchronous; the mean is the throughput). Goals (issue 13): d <= 1.0 x pytorch on CPU, <= 0.9 x
on CUDA.

--amp fp16|bf16: both sides in mixed precision (train --amp; PyTorch autocast, GradScaler for
fp16 only); the step goal is then <= 1.0 x PyTorch's on CUDA too, and on CUDA three rows per
width: gemm_peak (a plain GEMM batch x W x W in that dtype through PyTorch/cuBLAS, TFLOP/s),
model_tflops (the step's GEMM FLOPs over the step time, both sides) and of_gemm_peak (goal: at
least 50 %).

The train and ddprun binaries are copied to a temporary directory first so a
concurrent rebuild cannot change them mid-run.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r"^rank (\d+) (step_us|backward_us|maxrss_kb|checksum|finite) (\S+)$")


def run_job(argv, env, timeout):
    """Runs a launcher; returns (rc, stdout text, stderr tail)."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return 124, out, err[-2000:]
    try:
        os.killpg(p.pid, signal.SIGKILL)  # anything left behind
    except OSError:
        pass
    return p.returncode, out, err[-2000:]


def why_failed(err):
    """The lines of a failed job's stderr that say why: the workers' own, else ddprun's last."""
    said = re.findall(r"its last (?:output|stderr) line: (.*)", err)  # ddprun's failure report
    if said:
        return said[0]
    lines = err.strip().splitlines()
    own = [line for line in lines if line.strip() and not re.match(
        r"\[ddprun|[=-]+$|\s|\S+ FAILED$|(Failures|Root Cause)", line)]
    return " | ".join((own or lines)[-3:])


def parse(out, nranks, warmup, stat=statistics.median):
    """Per-rank dict: step (`stat`, default the median, of the ms after warm-up), backward (ms),
    rss (MiB), checksum/finite.  Raises ValueError when something is missing."""
    ranks = {}
    for line in out.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        r, key, val = int(m.group(1)), m.group(2), m.group(3)
        d = ranks.setdefault(r, {})
        if key in ("step_us", "backward_us"):
            v = [int(x) for x in val.split(",")]
            d[key] = stat(v[warmup:]) / 1000.0
        elif key == "maxrss_kb":
            d["rss"] = int(val) / 1024.0
        else:
            d[key] = val
    if sorted(ranks) != list(range(nranks)):
        raise ValueError("ranks reported: %s" % sorted(ranks))
    for r, d in ranks.items():
        if "step_us" not in d or "rss" not in d:
            raise ValueError("rank %d: no timing lines" % r)
    return ranks


# A plain GEMM of the layers' shape (batch x W times W x W) in the AMP dtype, through PyTorch
# (cuBLAS): the dense peak the model's rate is compared with.
GEMM_PROBE = r"""
import sys, time, torch
m, n, k = map(int, sys.argv[1:4])
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[sys.argv[4]]
a = torch.randn(m, k, device="cuda", dtype=dtype)
b = torch.randn(k, n, device="cuda", dtype=dtype)
for _ in range(10):
    a @ b
torch.cuda.synchronize()
reps = 100
t = time.perf_counter()
for _ in range(reps):
    a @ b
torch.cuda.synchronize()
print(2.0 * m * n * k * reps / (time.perf_counter() - t) / 1e12)
"""


def gemm_tflops(torchrun, batch, width, amp, timeout):
    python = os.path.join(os.path.dirname(os.path.abspath(torchrun)), "python")
    try:
        r = subprocess.run([python, "-c", GEMM_PROBE, str(batch), str(width), str(width), amp],
                           capture_output=True, text=True, timeout=timeout)
        return float(r.stdout.split()[-1]) if r.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def model_flops(width, depth, batch):
    """FLOPs of one training step of the MLP: 2 per multiply-add forward, 4 backward (the
    input gradient of the first layer is not computed)."""
    shapes = [(32, width)] + [(width, width)] * (depth - 1) + [(width, 1)]
    macs = sum(i * o for i, o in shapes) * batch
    return 6 * macs - 2 * 32 * width * batch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ddprun", default=os.path.join(HERE, "..", "build", "ddprun"))
    ap.add_argument("--train", default=os.path.join(HERE, "..", "build", "examples", "train"))
    ap.add_argument("--torchrun", default=os.path.expanduser("~/.cache/ddprun/venv/bin/torchrun"))
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (default 5, --quick 3)")
    ap.add_argument("--quick", action="store_true", help="3 runs, 100 steps")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 200)")
    ap.add_argument("--warmup", type=int, default=20, help="steps before the timed ones")
    ap.add_argument("--width", default="512",
                    help="hidden width, or a comma-separated list (one set of step rows per width)")
    ap.add_argument("--compare-copies", action="store_true",
                    help="also run train --grad-copies (gradients copied into and out of the "
                         "buckets) at every width: what gradients as bucket views save")
    ap.add_argument("--no-overlap", action="store_true", help="skip the overlap runs")
    ap.add_argument("--amp", default=None, choices=["fp16", "bf16"],
                    help="mixed precision on both sides (train --amp; PyTorch autocast); with "
                         "--device cuda also the model's TFLOP/s against a plain bf16/fp16 GEMM")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--ov-width", type=int, default=512)
    ap.add_argument("--ov-depth", type=int, default=4)
    ap.add_argument("--ov-batch", type=int, default=96)
    ap.add_argument("--ov-bucket-cap-mb", type=float, default=25.0,
                    help="the reducer's bucket cap in the overlap runs (25 = PyTorch's default; "
                         "smaller gives several buckets, so reduction can start during backward)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per job")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--nproc", type=int, default=None, help="ranks (default 2 on CPU, 1 on CUDA)")
    args = ap.parse_args()
    try:
        widths = [int(w) for w in args.width.split(",")]
    except ValueError:
        ap.error("--width %s: not an integer or a comma-separated list of integers" % args.width)
    runs = args.runs or (3 if args.quick else 5)
    steps = args.steps or (100 if args.quick else 200)
    total_steps = steps + args.warmup
    cuda = args.device == "cuda"
    nproc = args.nproc or (1 if cuda else 2)
    onehost = [os.path.join(HERE, "..", "tests", "tools", "onehost")] if cuda and nproc > 1 else []
    stat = statistics.mean if cuda else statistics.median
    goal_ratio = 0.9 if cuda and not args.amp else 1.0  # issue 13: amp <= autocast's step
    t_start = time.time()

    benchlib.require_executables((args.ddprun, args.train, args.torchrun))
    torch_ver = benchlib.torch_version(args.torchrun)
    model = benchlib.cpu_model()

    root = tempfile.mkdtemp(prefix="ddprun_ddp_bench_")
    try:
        ddprun = benchlib.snapshot(os.path.abspath(args.ddprun), root, "ddprun")
        train = benchlib.snapshot(os.path.abspath(args.train), root, "train")
        if cuda:  # train --device cuda loads its CUDA plugin from its own directory
            plugin = os.path.join(os.path.dirname(os.path.abspath(args.train)),
                                  "libddprun_train_cuda.so")
            if not os.path.exists(plugin):
                sys.exit("ddp_bench: %s missing: was train built without CUDA?" % plugin)
            benchlib.snapshot(plugin, root, "libddprun_train_cuda.so")
        ddprun_ver = benchlib.ddprun_version(ddprun)
        env = benchlib.launcher_env(
            keys=("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"),
            OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1",
            NVIDIA_TF32_OVERRIDE="0")

        def model_args(w, d, b):
            return ["--width", str(w), "--depth", str(d), "--batch", str(b),
                    "--steps", str(total_steps), "--time", "--device", args.device] + (
                        ["--amp", args.amp] if args.amp else [])

        def ddprun_job(w, d, b, extra=()):
            logd = os.path.join(root, "logs")
            shutil.rmtree(logd, ignore_errors=True)
            return [ddprun, "--standalone", "--nproc_per_node=%d" % nproc, "--log_dir", logd,
                    "--no_python"] + onehost + [train] + model_args(w, d, b) + list(extra)

        def torch_job(w, d, b):
            script = os.path.join(HERE, "ddp_torch_mlp.py")
            python = os.path.join(os.path.dirname(os.path.abspath(args.torchrun)), "python")
            program = ["--no-python"] + onehost + [python, script] if onehost else [script]
            return [os.path.abspath(args.torchrun), "--standalone",
                    "--nproc_per_node=%d" % nproc] + program + model_args(w, d, b)

        problems = []
        res = {}  # key -> list of per-run dicts

        def measure(key, argv, check):
            rc, out, err = run_job(argv, env, args.timeout)
            try:
                if rc != 0:
                    raise ValueError("exit code %d: %s" % (rc, why_failed(err)))
                ranks = parse(out, nproc, args.warmup, stat)
                bad = check(ranks)
                if bad:
                    raise ValueError(bad)
            except ValueError as e:
                problems.append("%s run %d: %s" % (key, len(res.get(key, [])), e))
                return
            res.setdefault(key, []).append(ranks)

        def same_checksum(ranks):
            c = {d.get("checksum") for d in ranks.values()}
            return None if len(c) == 1 and None not in c else "checksums differ: %s" % c

        def torch_finite(ranks):
            ok = all(d.get("finite") == "1" for d in ranks.values())
            return None if ok else "non-finite parameters"

        def no_check(ranks):
            return None

        print("# DDP step time and overlap benchmark: ddprun + train vs PyTorch DDP")
        print(benchlib.date_line())
        print(benchlib.host_line(model, os.getloadavg()[0]))
        print("#  ddprun: %s (%s), train: %s" % (os.path.abspath(args.ddprun), ddprun_ver,
                                                 os.path.abspath(args.train)))
        backend = "NCCL" if cuda else "Gloo"
        print("#  pytorch: %s (torch %s), DDP %s, bench/ddp_torch_mlp.py" % (
            os.path.abspath(args.torchrun), torch_ver, backend))
        precision = ("--amp %s (PyTorch: autocast)" % args.amp if args.amp
                     else "fp32" + (" (TF32 off)" if cuda else ""))
        print("#  all: %s, %s, %d ranks%s, --standalone, OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1, "
              "%s, SGD" % ("CUDA" if cuda else "CPU", backend, nproc,
                           " on one GPU (tests/tools/onehost)" if onehost else "", precision))
        print("#  step: width %s depth %d batch %d per rank; %d warm-up + %d timed steps%s" % (
            ",".join(map(str, widths)), args.depth, args.batch, args.warmup, steps,
            "; copies: train --grad-copies" if args.compare_copies else ""))
        print("#  overlap: width %d depth %d batch %d per rank, bucket cap %g MiB (ddprun only); "
              "modes ddp, --no-comm, --comm-only" % (args.ov_width, args.ov_depth, args.ov_batch,
                                                     args.ov_bucket_cap_mb))
        print("#  time/step = %s over timed steps per rank, MAX over ranks; then median of %d runs" % (
            "mean" if cuda else "median", runs))
        print("#")
        sys.stdout.flush()

        D, B = args.depth, args.batch
        OW, OD, OB = args.ov_width, args.ov_depth, args.ov_batch
        for W in widths:
            for _ in range(runs):
                measure("ddprun@%d" % W, ddprun_job(W, D, B), same_checksum)
                if args.compare_copies:
                    measure("copies@%d" % W, ddprun_job(W, D, B, ["--grad-copies"]), same_checksum)
                measure("pytorch@%d" % W, torch_job(W, D, B), torch_finite)
        cap = ["--bucket-cap-mb", str(args.ov_bucket_cap_mb)]
        overlap_runs = 0 if nproc == 1 or args.no_overlap else runs  # one rank: nothing to overlap
        for _ in range(overlap_runs):
            measure("ov_ddp", ddprun_job(OW, OD, OB, cap), same_checksum)
            measure("ov_nocomm", ddprun_job(OW, OD, OB, ["--no-comm"] + cap), no_check)
            measure("ov_comm", ddprun_job(OW, OD, OB, ["--comm-only"] + cap), same_checksum)

        def per_run(key, field, agg=max):
            return [agg(d[field] for d in ranks.values()) for ranks in res.get(key, [])]

        def rank0(key, field):
            return [ranks[0][field] for ranks in res.get(key, [])]

        med = benchlib.median_or_none

        def fmt(v, f="%.2f"):
            return "-" if v is None else f % v

        rows, spreads = [], []
        goals = [0, 0]  # met, total

        def row(test, metric, unit, d, p, goal, status, f="%.2f"):
            ratio = "%.3f" % (d / p) if d is not None and p not in (None, 0) else "-"
            rows.append("  %-8s %-22s %-5s %12s %12s %8s  %-20s %s" % (
                test, metric, unit, fmt(d, f), fmt(p, f), ratio, goal, status))

        def spread(test, metric, who, v, f="%.2f"):
            if v:
                spreads.append("#   %-8s %-22s %-8s: min %s max %s  (runs: %s)" % (
                    test, metric, who, f % min(v), f % max(v), " ".join(f % x for x in v)))

        def judge(ok):
            goals[1] += 1
            if ok is None:
                return "FAIL (no data)"
            goals[0] += bool(ok)
            return "met" if ok else "FAIL"

        # 1. step time and memory, side by side, per width
        for W in widths:
            d_key, c_key, p_key = "ddprun@%d" % W, "copies@%d" % W, "pytorch@%d" % W
            d_step, p_step = per_run(d_key, "step_us"), per_run(p_key, "step_us")
            dm, pm = med(d_step), med(p_step)
            tag = "@%d" % W
            row("step", "time_per_step" + tag, "ms", dm, pm, "d <= %.1f x pytorch" % goal_ratio,
                judge(None if dm is None or pm is None else dm <= goal_ratio * pm))
            spread("step", "time_per_step" + tag, "ddprun", d_step)
            spread("step", "time_per_step" + tag, "pytorch", p_step)
            spread("step", "rank0_step" + tag, "ddprun", rank0(d_key, "step_us"))
            spread("step", "rank0_step" + tag, "pytorch", rank0(p_key, "step_us"))
            if args.compare_copies:
                c_step = per_run(c_key, "step_us")
                row("step", "grad_copies" + tag, "ms", med(c_step), pm, "report", "-")
                spread("step", "grad_copies" + tag, "ddprun", c_step)
            dv, pv = per_run(d_key, "rss"), per_run(p_key, "rss")
            row("step", "peak_rss" + tag, "MiB", med(dv), med(pv), "report", "-", "%.1f")
            spread("step", "peak_rss" + tag, "ddprun", dv, "%.1f")
            spread("step", "peak_rss" + tag, "pytorch", pv, "%.1f")
            row("step", "good_runs" + tag, "runs", len(res.get(d_key, [])),
                len(res.get(p_key, [])), "all %d" % runs, "-", "%d")

        # 1b. --amp on CUDA: the model's arithmetic rate against a plain GEMM of the layer shape
        if cuda and args.amp:
            for W in widths:
                peak = gemm_tflops(args.torchrun, B, W, args.amp, args.timeout)
                flops = model_flops(W, D, B)
                d_step = med(per_run("ddprun@%d" % W, "step_us"))
                p_step = med(per_run("pytorch@%d" % W, "step_us"))
                rate = [None if t is None else flops / (t * 1e-3) / 1e12 for t in (d_step, p_step)]
                row("amp", "gemm_peak@%d" % W, "TF/s", peak, None, "report",
                    "-" if peak else "FAIL (no data)")
                row("amp", "model_tflops@%d" % W, "TF/s", rate[0], rate[1], "report", "-")
                share = None if None in (rate[0], peak) else 100 * rate[0] / peak
                row("amp", "of_gemm_peak@%d" % W, "%", share, None, "d >= 50 %",
                    judge(None if share is None else share >= 50), "%.1f")

        # 2. overlap (ddprun only; needs two ranks)
        if overlap_runs:
            t_ddp, t_no, t_comm = (per_run(k, "step_us")
                                   for k in ("ov_ddp", "ov_nocomm", "ov_comm"))
            # On CUDA train's backward time is the host's, launching the kernels (0.2 ms where
            # the device takes 10: seen on an H200), not the device's: not shown.
            bwd = [] if cuda else per_run("ov_nocomm", "backward_us")
            m_ddp, m_no, m_comm, m_bwd = med(t_ddp), med(t_no), med(t_comm), med(bwd)
            for name, v, m in (("t_ddp", t_ddp, m_ddp), ("t_nocomm", t_no, m_no),
                               ("t_comm_alone", t_comm, m_comm), ("backward_alone", bwd, m_bwd)):
                if name == "backward_alone" and cuda:
                    row("overlap", name, "ms", None, None, "report",
                        "not measured on CUDA (asynchronous launches)")
                    continue
                row("overlap", name, "ms", m, None, "report", "-")
                spread("overlap", name, "ddprun", v)
            if None not in (m_comm, m_bwd):
                row("overlap", "comm/backward", "x", m_comm / m_bwd, None, "about 1", "-")
            hidden = (None if None in (m_ddp, m_no, m_comm) or m_comm <= 0
                      else 1 - (m_ddp - m_no) / m_comm)
            # Ranks sharing one GPU (tests/tools/onehost) contend for it: NCCL's kernels, waiting
            # on the socket transport, hold the GPU the other rank's backward needs (an H200:
            # t_ddp 79 ms against t_nocomm 34 + t_comm 16). That measures contention, not
            # overlap: shown, not judged.
            status = ("not judged: %d ranks share one GPU (contention, not overlap; needs %d "
                      "GPUs)" % (nproc, nproc) if onehost
                      else judge(None if hidden is None else hidden >= 0.70))
            row("overlap", "hidden_fraction", "%", None if hidden is None else 100 * hidden, None,
                "d >= 70 %", status, "%.1f")
            n = min(len(t_ddp), len(t_no), len(t_comm))
            per_run_hidden = [100 * (1 - (t_ddp[i] - t_no[i]) / t_comm[i]) for i in range(n)]
            spread("overlap", "hidden_fraction", "ddprun", per_run_hidden, "%.1f")

        # 3. GPU rows
        if not cuda:
            has_gpu = os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")
            why = ("not run: --device cuda, and scripts/gpu-check.sh" if has_gpu
                   else "not run: no CUDA device")
            row("gpu", "cuda_step", "ms", None, None, "d <= 0.9 x pytorch", why)

        print("#  %-6s %-22s %-5s %12s %12s %8s  %-20s %s" % (
            "test", "metric", "unit", "ddprun", "pytorch", "d/p", "goal", "status"))
        for r in rows:
            print(r)
        print("#")
        print("#  min/max over runs (time_per_step: max over ranks; rank0_step: rank 0 alone):")
        for s in spreads:
            print(s)
        return benchlib.print_footer(goals[0], goals[1], problems,
                                     before=[benchlib.elapsed_line(t_start, load=True)])
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
