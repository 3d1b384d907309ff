"""The DDP core end to end: examples/train under ddprun with Gloo on CPU, against its own
single-process --reference run, and each classic DDP failure on demand."""
import os
import re
import signal
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from trainlib import DDPRUN, SMALL, TRAIN, assert_matches_reference, checksums, reference
from trainlib import freeze_inside_a_collective, rank_pids
from trainlib import train_env as env


def ddprun(nproc, *args, timeout=120, **extra_env):
    return subprocess.run([DDPRUN, f"--nproc_per_node={nproc}", "--shutdown_timeout=5", TRAIN,
                           "--device", "cpu", *args], env=env(**extra_env), capture_output=True,
                          text=True, timeout=timeout)


def rank_1_first(shell, *args):
    """Two ranks of train under ddprun, rank 1 running `shell` before it (a late start, options of
    its own in $x)."""
    return subprocess.run([DDPRUN, "--nproc_per_node=2", "--no_python", "/bin/sh", "-c",
                           f'if [ "$RANK" = 1 ]; then {shell}; fi; '
                           f'exec {TRAIN} --device cpu {" ".join(args)} $x'],
                          env=env(), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("extra, rel", [([], 1e-6), (["--optimizer", "adam"], 1e-6),
                                        (["--amp", "fp16"], 1e-4),
                                        (["--amp", "bf16", "--clip"], 1e-4)])
def test_every_rank_matches_the_reference_and_the_loss_falls(world, extra, rel):
    args = SMALL + extra
    r = ddprun(world, *args)
    assert r.returncode == 0, r.stderr
    assert_matches_reference(r.stdout, world, args, rel)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_two_ranks_reproduce_the_reference_bit_for_bit_with_as_many_gemm_threads(threads):
    """The sums inside a GEMM are split by its threads: the reference run matched a 2-rank run
    only when both had one thread (ddprun sets OMP_NUM_THREADS; found by an attacking helper).
    The reference says how many it used."""
    e = env(OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    ref = subprocess.run([TRAIN, "--reference", "--world-size", "2", *SMALL], env=e,
                         capture_output=True, text=True, timeout=120)
    assert ref.returncode == 0, ref.stderr
    assert f"reference: GEMMs on {threads} thread(s)" in ref.stdout, ref.stdout
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", TRAIN, "--device", "cpu", *SMALL], env=e,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    expected = float(re.search(r"reference checksum (\S+)", ref.stdout).group(1))
    assert set(checksums(r.stdout).values()) == {expected}, (ref.stdout, r.stdout)


def test_gradients_as_bucket_views_train_exactly_as_copied_gradients():
    # The default (the model writes its gradients into the reducer's buckets, moved once more when
    # the buckets are rebuilt after step 0) against --grad-copies: the same arithmetic, so the same
    # bits, with several buckets and a rebuild.
    args = SMALL + ["--bucket-cap-mb", "0.01", "--optimizer", "adam", "--unused-layer",
                    "--find-unused-parameters"]
    views, copies = ddprun(2, *args), ddprun(2, *args, "--grad-copies")
    assert views.returncode == 0, views.stderr
    assert copies.returncode == 0, copies.stderr
    assert checksums(views.stdout) == checksums(copies.stdout)
    assert_matches_reference(views.stdout, 2, args, 1e-6)


def test_unused_layer_fails_on_the_first_step_naming_the_parameters():
    start = time.monotonic()
    r = ddprun(2, *SMALL, "--unused-layer")
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - start < 30
    for rank in (0, 1):
        assert re.search(rf"rank {rank}.*step 0.*unused\.weight \[64, 64\], unused\.bias \[64\]",
                         r.stderr), r.stderr
    assert "--find-unused-parameters" in r.stderr
    assert "Expected to have finished reduction" not in r.stderr


def test_unused_layer_trains_with_find_unused_parameters():
    args = SMALL + ["--unused-layer", "--find-unused-parameters"]
    r = ddprun(2, *args)
    assert r.returncode == 0, r.stderr
    sums = checksums(r.stdout)
    assert len(set(sums.values())) == 1
    assert sums[0] == pytest.approx(reference(2, *args), rel=1e-6)


# fp16 scales the loss (65536, halved at the skipped step); bf16 and fp32 keep scale 1, as
# PyTorch trains bf16 without a GradScaler, and still skip a non-finite step on every rank.
@pytest.mark.parametrize("amp,scale", [([], "1"), (["--amp", "fp16"], "32768"),
                                       (["--amp", "bf16"], "1")])
def test_nan_step_is_skipped_on_every_rank_and_the_layer_named(amp, scale):
    args = SMALL + amp + ["--nan-at-step", "3"]
    r = ddprun(2, *args)
    assert r.returncode == 0, r.stderr
    assert re.search(r"step 3: skipped \(inf/NaN gradients\), scale %s$" % scale, r.stdout,
                     re.MULTILINE), r.stdout
    # After the all-reduce every rank has the NaN; the check before it names the rank that made it.
    assert ("step 3: non-finite gradients in layers.1.weight, after the all-reduce; made by "
            "rank 1 (layers.1.weight) before it\n") in r.stdout, r.stdout
    sums = checksums(r.stdout)
    assert len(set(sums.values())) == 1
    assert sums[0] == pytest.approx(reference(2, *args), rel=1e-6)


def test_no_broadcast_buffers_still_trains():
    r = ddprun(2, *SMALL, "--no-broadcast-buffers")
    assert r.returncode == 0, r.stderr
    assert len(set(checksums(r.stdout).values())) == 1


def test_a_rank_that_stops_participating_makes_the_others_time_out_not_hang():
    start = time.monotonic()
    r = ddprun(2, *SMALL, "--hang-at-step", "3", "--hang-rank", "1", "--collective-timeout", "3")
    elapsed = time.monotonic() - start
    assert r.returncode != 0
    assert elapsed < 30, elapsed
    assert re.search(r"allreduce #\d+ \([^)]*float32\) timed out after \d", r.stderr), r.stderr
    # Rank 0 timed out (the root cause by time); the flight recorders name rank 1 as why.
    assert re.search(r"cause     : rank 1 never entered allreduce #\d+ \([^)]*\), in which rank 0 "
                     r"waited until it failed", r.stderr), r.stderr


def test_detail_debugging_names_the_ranks_whose_collectives_differ_at_once():
    """TORCH_DISTRIBUTED_DEBUG=DETAIL, as PyTorch's: each collective is compared across the ranks
    before it runs. Rank 2 all-reduces its loss at step 5 where the others broadcast buffers:
    every rank fails at once naming both sides, where it would hang until the timeout."""
    start = time.monotonic()
    r = ddprun(3, "--width", "32", "--depth", "1", "--steps", "40", "--diverge-at-step", "5",
               "--hang-rank", "2", "--collective-timeout", "600",
               TORCH_DISTRIBUTED_DEBUG="DETAIL")
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - start < 30
    assert re.search(r"ddp: the ranks' collectives differ \(TORCH_DISTRIBUTED_DEBUG=DETAIL\): "
                     r"ranks 0,1: #(\d+) broadcast\(from rank 0\) of \d+ uint8; "
                     r"rank 2: #\1 allreduce\(sum\) of 1 float32: every rank must issue the same "
                     r"collectives", r.stderr), r.stderr


def test_collectives_of_other_sizes_that_gloo_aborts_on_leave_its_check_in_the_error_file():
    # Rank 1 all-reduces 4 B where rank 0 all-reduces a bucket: Gloo's I/O thread fails a check
    # no caller can catch, and the process ends (SIGABRT, as under PyTorch); the report said
    # "no traceback" (attack 91).
    r = ddprun(2, "--steps", "10", "--diverge-at-step", "4", "--no-broadcast-buffers",
               "--collective-timeout", "10")
    assert r.returncode == 134, r.stderr
    assert re.search(r"traceback : ddp: Gloo ended the process \(a check in its I/O thread "
                     r"failed\): \[enforce fail at [^]]*\] .*: a message of another size than the "
                     r"collective expected", r.stderr), r.stderr
    # Rank 0's recorder read before or after its side of the collective ended (CI saw both).
    assert re.search(r"cause +: rank 1 is in allreduce #\d+ with 4 B while rank 0 (ran it|is in "
                     r"it with [\d.]+ \S*B)", r.stderr), r.stderr


def test_detail_debugging_trains_exactly_as_without_it():
    plain = ddprun(2, *SMALL)
    detail = ddprun(2, *SMALL, TORCH_DISTRIBUTED_DEBUG="DETAIL")
    assert plain.returncode == 0 and detail.returncode == 0, (plain.stderr, detail.stderr)
    assert checksums(detail.stdout) == checksums(plain.stdout)
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL: each collective is compared" in detail.stderr
    bad = ddprun(1, *SMALL, TORCH_DISTRIBUTED_DEBUG="VERBOSE")
    assert bad.returncode != 0
    assert "TORCH_DISTRIBUTED_DEBUG=VERBOSE is not a level: use OFF, INFO or DETAIL" in bad.stderr


def test_a_job_suspended_whole_inside_a_collective_does_not_time_it_out(launch):
    # Rank 1 stops first, so rank 0 waits for it in a collective when the whole job (ddprun
    # included) is frozen for 5 s, as by scontrol suspend: three times the collective timeout
    # passes, none of it run. Gloo's own timeout counted it (every rank failed on resume).
    args = ["--width", "256", "--depth", "4", "--batch", "64", "--steps", "800"]
    p = launch(["--nproc_per_node=2", TRAIN, "--device", "cpu", *args,
                "--collective-timeout", "2"], env=env())
    freeze_inside_a_collective(p)
    assert p.wait(timeout=120) == 0, p.output()
    assert "timed out" not in p.stderr(), p.output()
    assert_matches_reference(p.stdout(), 2, args, 1e-6)


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        found = re.search(r"^flags\s*:(.*)$", f.read(), re.M)
    return set(found.group(1).split()) if found else set()


BEFORE_AVX2 = {"prescott", "core2", "penryn", "dunnington", "nehalem", "sandybridge", "atom",
               "unknown", "katmai", "coppermine", "northwood", "banias", "athlon", "opteron",
               "opteron_sse3", "barcelona", "nano", "bobcat", "bulldozer", "piledriver"}


@pytest.mark.skipif(not {"avx2", "fma"} <= cpu_flags(), reason="needs a CPU with AVX2 and FMA")
def test_openblas_runs_kernels_the_cpu_has_and_a_users_choice_stands():
    # OPENBLAS_VERBOSE=2: OpenBLAS says "Core: NAME" each time it loads. Debian 12's OpenBLAS
    # takes a CPU model it does not know (an Emerald Rapids Xeon) for a Prescott (SSE3).
    r = subprocess.run([TRAIN, "--reference", *SMALL], env=env(OPENBLAS_VERBOSE="2"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cores = re.findall(r"Core: (\S+)", r.stdout + r.stderr)
    assert cores and cores[-1].lower() not in BEFORE_AVX2, r.stdout + r.stderr
    if cores[0].lower() in BEFORE_AVX2:  # taken for an older CPU: run again, and said so
        assert len(cores) == 2, r.stdout + r.stderr
        assert re.search(rf"train: OpenBLAS \S+ took this CPU for a {cores[0]} \(kernels without "
                         rf"AVX2\): running with OPENBLAS_CORETYPE={cores[1]}", r.stderr), r.stderr
    else:
        assert len(cores) == 1 and "OPENBLAS_CORETYPE" not in r.stderr, r.stdout + r.stderr
    chosen = subprocess.run([TRAIN, "--reference", *SMALL],
                            env=env(OPENBLAS_VERBOSE="2", OPENBLAS_CORETYPE="Prescott"),
                            capture_output=True, text=True, timeout=60)
    assert chosen.returncode == 0, chosen.stderr
    assert re.findall(r"Core: (\S+)", chosen.stdout + chosen.stderr) == ["Prescott"]
    assert "OPENBLAS_CORETYPE" not in chosen.stderr, chosen.stderr


def test_a_crash_is_the_root_cause():
    r = ddprun(2, *SMALL, "--crash-at-step", "4", "--hang-rank", "1")
    assert r.returncode == 1, r.stderr
    assert "crashing at step 4" in r.stdout + r.stderr
    assert re.search(r"Root Cause.*\n\[0\]:\n.*\n.*\n  rank      : 1", r.stderr), r.stderr


def test_a_rank_stopped_past_the_collective_timeout_is_named_as_the_cause(tmp_path):
    """Rank 0 SIGSTOPped 4 s; rank 1 timed out in its all-reduce after 2 s. The report said only
    "for a rank that stopped taking part" (found by an attacking helper): the stopped rank is
    named as the one that held the collective."""
    p = subprocess.Popen([DDPRUN, "--nproc_per_node=2", f"--log_dir={tmp_path}", TRAIN,
                          "--device", "cpu", "--width", "64", "--depth", "2", "--batch", "16",
                          "--steps", "100000", "--collective-timeout", "2"],
                         env=env(OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        rank0 = rank_pids(p.pid, 2)[0]
        time.sleep(1.0)  # training
        os.kill(rank0, signal.SIGSTOP)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 1, err
    # The collective rank 0 was stopped before: a bucket's allreduce, or the buffers' broadcast.
    assert re.search(r"cause +: rank 1 waited 2 s in \w+ #\d+ \(the collective timeout, "
                     r"2 s\) while rank 0 was stopped by a signal \(SIGSTOP\): the stopped rank "
                     r"held the collective", err), err


@pytest.mark.parametrize("differs, says", [
    # Buckets of other sizes at step 0: Gloo aborted the process (SIGABRT; attack 91).
    ("--bucket-cap-mb 0.001", "rank 0 has --bucket-cap-mb=25, rank 1 has --bucket-cap-mb=0.001"),
    # The grad scaler on one rank only: its found_inf all-reduce met the others' buckets.
    ("--nan-at-step 1", "rank 0 has --nan-at-step=off, rank 1 has --nan-at-step=1"),
])
def test_a_setting_that_shapes_the_collectives_differing_between_ranks_is_refused(differs, says):
    r = rank_1_first(f'x="{differs}"', "--steps", "3", "--width", "1024", "--depth", "2",
                     "--collective-timeout", "20")
    assert r.returncode == 1, r.stderr
    assert "ddp: the ranks' settings differ: " + says in r.stderr, r.stderr
    assert "SIGABRT" not in r.stderr


def test_a_rank_that_never_comes_to_the_set_up_is_named_by_the_one_that_waited():
    # The waiting rank said "waited 3000 ms for keys ddp/attempt_0/gloo/1", wrote no error file,
    # and was the root cause with "no traceback" (attack 91).
    r = rank_1_first("sleep 30", *SMALL, "--collective-timeout", "2")
    assert r.returncode == 1, r.stderr
    assert re.search(r"traceback : train: rank 0: ddp: gloo set-up \(rank 0 of 2, [^)]*\): rank\(s\) "
                     r"1 did not arrive within 2 s: they failed, hang or started late",
                     r.stderr), r.stderr


def test_a_loss_that_becomes_nan_fails_every_rank_naming_the_step():
    """--lr 1e20 trained on in nan and exited 0 (noticed at stop 43, attack 98 again): the ranks
    read the same mean loss, so all stop at the same step, and the reference alike."""
    r = ddprun(2, *SMALL, "--lr", "1e20")
    assert r.returncode == 1, r.stderr
    for rank in (0, 1):
        assert (f"train: rank {rank}: step 10: the loss became nan (the mean over the ranks, "
                "read every 10 steps): training diverged; lower --lr (1e+20)") in r.stderr, r.stderr
    assert "cause     : the loss became nan" in r.stderr, r.stderr
    ref = subprocess.run([TRAIN, "--reference", *SMALL, "--lr", "1e20"], env=env(),
                         capture_output=True, text=True, timeout=60)
    assert ref.returncode == 1, ref.stderr
    assert "train: reference: step 10: the loss became nan" in ref.stderr, ref.stderr
    # Clipping bounds no Adam step, nor one already clipped: not advised then (attack 100).
    adam = subprocess.run([TRAIN, "--reference", *SMALL, "--lr", "1e6", "--optimizer", "adam",
                           "--clip"], env=env(), capture_output=True, text=True, timeout=60)
    assert adam.returncode == 1, adam.stderr
    assert re.search(r"training diverged; lower --lr \(1e\+06\)\n", adam.stderr), adam.stderr


def test_a_collective_timeout_under_a_tenth_of_a_second_is_said_as_given():
    """Found by an attacking helper (attack 98): --collective-timeout 0.04 was said as "timed out
    after 0 s (collective timeout 0 s"; at 1 ms the set-up failed naming only a rank that "did
    not arrive", when the user's limit bounds the set-up too."""
    r = ddprun(2, *SMALL, "--hang-at-step", "3", "--collective-timeout", "0.04")
    assert r.returncode == 1, r.stderr
    # The wait as measured (0.041 s under load, in CI), the limit as given.
    m = re.search(r"timed out after ([\d.]+) s \(collective timeout 0\.04 s", r.stderr)
    assert m and float(m[1]) >= 0.04, r.stderr
    # Rank 1 comes 2 s late to a set-up bounded by a 0.3 s limit: the limit is named.
    r = rank_1_first("sleep 2", *SMALL, "--collective-timeout", "0.3")
    assert r.returncode == 1, r.stderr
    assert re.search(r"traceback : train: rank 0: .*did not arrive within 0\.3 s.*; "
                     r"--collective-timeout 0\.3 s bounds the set-up and each of its store "
                     r"requests too", r.stderr), r.stderr


def test_a_model_that_differs_between_ranks_is_reported_not_hung():
    start = time.monotonic()
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--no_python", "/bin/sh", "-c",
                        f'exec {TRAIN} --device cpu --steps 2 --depth 2 --width $((64 + RANK))'],
                       env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert time.monotonic() - start < 30
    assert re.search(r"differs between ranks at parameter #0: rank 0 has layers\.0\.weight "
                     r"\[64, 32\], rank 1 has layers\.0\.weight \[65, 32\]", r.stderr), r.stderr


def test_without_the_launcher_the_worker_says_how_to_start_it():
    r = subprocess.run([TRAIN, "--device", "cpu"], env=env(), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert "RANK" in r.stderr and "WORLD_SIZE" in r.stderr and "ddprun" in r.stderr, r.stderr


def test_a_model_too_large_for_the_host_is_said_not_aborted():
    # It died of an uncaught std::bad_alloc (SIGABRT, exit 134; found by an attacking helper).
    r = subprocess.run([TRAIN, "--reference", "--width", "2147483647", "--steps", "1"], env=env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "train: out of host memory for the model and the batch (--width 2147483647" in r.stderr


def test_an_out_of_memory_rank_writes_its_error_file():
    """It printed its message but wrote no error file: the report said "no traceback" (attack 98)."""
    r = ddprun(1, "--width", "2147483647", "--steps", "1")
    assert r.returncode == 1, r.stderr
    assert re.search(r"traceback : train: out of host memory for the model and the batch "
                     r"\(--width 2147483647", r.stderr), r.stderr


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_each_ranks_timing_block_reaches_stdout_in_one_write(tmp_path):
    """Found by an attacking helper (attack 98): past about 700 steps the --time block of a rank
    outgrew stdio's buffer and reached the shared stdout in several writes, another rank's text
    landing inside a line. Every write of a worker to its stdout must begin a line."""
    trace = tmp_path / "strace"
    r = subprocess.run(["strace", "-f", "-qq", "-s", "12", "-e", "trace=write", "-e",
                        "signal=none", "-o", str(trace), DDPRUN, "--nproc_per_node=2", TRAIN,
                        "--steps", "2000", "--width", "8", "--depth", "1", "--time"],
                       env=env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stdout[-2000:]
    writes = [ln for ln in trace.read_text().splitlines() if re.match(r"\d+ +write\(1, ", ln)]
    # One write per rank's block (one strace line each, "<unfinished ...>" or not).
    assert len([ln for ln in writes if re.search(r'write\(1, "rank \d step_', ln)]) == 2, writes
    split = [ln for ln in writes if not re.match(r'\d+ +write\(1, "(rank|step) ', ln)]
    assert not split, split[:3]
    assert len(re.findall(r"^rank [01] step_us \d+(,\d+){1999}$", r.stdout, re.M)) == 2


@pytest.mark.parametrize("args, says", [
    (["--collective-timeout", "inf"], "--collective-timeout: a number of seconds from 0 to"),
    (["--collective-timeout", "nan"], "--collective-timeout: a number of seconds from 0 to"),
    (["--collective-timeout", "0.0001"], "--collective-timeout: below a millisecond"),
    (["--bucket-cap-mb", "1e30"], "--bucket-cap-mb: a number of MiB from 0 to"),
    (["--lr", "inf"], "--lr must be a positive, finite number"),
    (["--crash-at-step", "20"], "--crash-at-step 20: not a step of this run; use 0 to 19"),
    (["--hang-at-step", "-1"], "--hang-at-step -1: not a step of this run"),
    (["--hang-rank", "0"], "--hang-rank names the rank of --crash-at-step"),
    (["--reference", "--hang-at-exit"], "--reference has none"),
    # Accepted and ignored: no timing came out (attack 86).
    (["--reference", "--time"], "--time times the steps of a DDP run's ranks; --reference"),
    (["--world-size", "3"], "--world-size is the ranks --reference simulates"),
    # Ignored: the run exited 0 and the fault never came (attack 98).
    (["--comm-only", "--crash-at-step", "3"], "--comm-only runs none (it takes --hang-at-exit)"),
    # Words that are no option's value were dropped: --clip 5.0 clipped at 1.0 (attack 91).
    (["--clip", "5.0"], 'unexpected argument "5.0": train takes no positional arguments'),
    (["--", "--steps", "abc"], 'unexpected argument "--steps"'),
    # Taken as 2^64 - 1 by the option parser (found by an attacking helper).
    (["--seed", "-1"], "--seed -1: must be a whole number from 0 to 18446744073709551615"),
])
def test_a_value_the_trainer_cannot_honour_is_a_usage_error(args, says):
    # Each used to run to the end (a crash or hang never came, a NaN timeout became 600 s) or
    # to die in Gloo's set-up.
    r = subprocess.run([TRAIN, "--device", "cpu", *SMALL, *args], env=env(), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr, r.stderr


def test_a_fault_rank_outside_the_job_is_a_usage_error():
    r = ddprun(2, *SMALL, "--crash-at-step", "1", "--hang-rank", "5")
    assert r.returncode == 2, r.stderr
    assert "--hang-rank 5 is not a rank of this job (WORLD_SIZE 2): use 0 to 1" in r.stderr


# The CUDA path lives in a plugin beside train (examples/train/cuda_plugin.hpp), loaded only for
# --device cuda: train itself starts where no CUDA library is installed.
PLUGIN = Path(TRAIN).with_name("libddprun_train_cuda.so")
CUDA_LIBRARIES = ("libcudart", "libcublas", "libnccl", "libcuda.")


def test_the_trainer_needs_no_cuda_library():
    dynamic = subprocess.run(["readelf", "-d", TRAIN], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    assert needed and not [n for n in needed if n.startswith(CUDA_LIBRARIES)], needed
    ldd = subprocess.run(["ldd", TRAIN], capture_output=True, text=True, timeout=10).stdout
    assert not [lib for lib in CUDA_LIBRARIES if lib in ldd], ldd


def test_a_cpu_rank_loads_no_cuda_library(tmp_path):
    # The loader's trace of every process of the job (ld.so writes DEBUG.<pid>).
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", TRAIN, "--device", "cpu", *SMALL],
                       env=env(LD_DEBUG="files", LD_DEBUG_OUTPUT=str(tmp_path / "ld")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(checksums(r.stdout)) == 2, r.stdout
    traces = {p.name: p.read_text() for p in tmp_path.glob("ld.*")}
    workers = {n: t for n, t in traces.items() if "file=libgloo" in t}
    assert len(workers) == 2, sorted(traces)
    for name, trace in workers.items():
        files = re.findall(r"file=(\S+)", trace)
        assert not [f for f in files if Path(f).name.startswith(CUDA_LIBRARIES)
                    or f.endswith(PLUGIN.name)], (name, files)


def test_device_cuda_without_the_plugin_fails_naming_what_is_missing(tmp_path):
    alone = tmp_path / "train"  # a copy of train without the plugin beside it
    shutil.copy(TRAIN, alone)
    r = subprocess.run([alone, "--device", "cuda"], env=env(), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, r.stderr
    if PLUGIN.exists():
        assert re.fullmatch(rf"train: --device cuda: load the CUDA plugin: {tmp_path}/"
                            r"libddprun_train_cuda\.so: cannot open shared object file: [^\n]+: "
                            r"install the CUDA runtime, cuBLAS and NCCL libraries[^\n]+, or use "
                            r"--device cpu\n", r.stderr), r.stderr
    else:
        assert "this build has no CUDA path" in r.stderr and "--device cpu" in r.stderr, r.stderr


@pytest.mark.skipif(not PLUGIN.exists() or Path("/dev/nvidia0").exists(),
                    reason="needs a build with the CUDA plugin on a host without a GPU")
def test_device_cuda_on_a_host_without_a_gpu_fails_naming_the_cause():
    r = subprocess.run([DDPRUN, "--nproc_per_node=1", "--shutdown_timeout=5", TRAIN, "--device",
                        "cuda", *SMALL], env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stderr
    # The plugin loaded (the CUDA libraries are here) and CUDA found no device.
    assert "load the CUDA plugin" not in r.stderr, r.stderr
    assert "CUDA_VISIBLE_DEVICES" in r.stderr, r.stderr


def test_a_store_not_there_fails_the_set_up_within_the_collective_timeout():
    """Attack 109: the worker tried to reach MASTER_ADDR:MASTER_PORT for a fixed 60 s, though
    its message said --collective-timeout bounded the set-up."""
    from conftest import free_port
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    start = time.monotonic()
    r = subprocess.run([str(TRAIN), "--device", "cpu", *SMALL, "--collective-timeout", "2"],
                       env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert r.returncode == 1, r
    assert "cannot be reached" in r.stderr and "--collective-timeout 2 s bounds the set-up" in \
        r.stderr, r
    assert took < 20, (took, r.stderr)
