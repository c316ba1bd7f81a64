"""What the Hugging Face benchmarks on the simulated runtime share
(hf_train.py, hf_decode.py): their model, a small GPT-2 built from a config
(random weights, 2 layers, nothing downloaded), and how they time a loop.
"""
import os
import resource
import time

import interleave

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402


def gpt2():
    """The model, on the (simulated) GPU, and its config; seeded."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config).cuda(), config


def timed(unit, warmup, n, one):
    """Times N runs of one() after WARMUP untimed ones: in one stretch (see
    steady), or, with GPUPERF_BENCH_BLOCK=B in the environment, in blocks of B
    runs with the injection library's stacks alternately off and on (see
    interleaved)."""
    block = int(os.environ.get("GPUPERF_BENCH_BLOCK", "0"))
    if block > 0:
        interleaved(unit, warmup, n, block, one)
    else:
        steady(unit, warmup, n, one)


def interleaved(unit, warmup, n, block, one):
    """Runs one() WARMUP times untimed, then N times in pairs of blocks of
    BLOCK runs with stacks off in one and on in the other (interleave.py).
    Prints interleave.line's line (the shell script takes the medians of its
    differences); then "stacks_on_runs R": the runs made with stacks on, the
    warmup included (the library's count of captures divided by R is the
    captures per run). With GPUPERF_BENCH_BLOCK_LOG=FILE, appends "START END
    STACKS" for each block to FILE: when it began and ended, in seconds of
    CLOCK_MONOTONIC, and 1 with stacks on (for perf_split.py)."""
    for _ in range(warmup):
        one()
    torch.cuda.synchronize()
    r = interleave.blocks(one, n, block, torch.cuda.synchronize)
    block_log = os.environ.get("GPUPERF_BENCH_BLOCK_LOG")
    if block_log:
        with open(block_log, "a") as f:
            f.writelines("%.6f %.6f %d\n" % s for s in r["spans"])
    print(interleave.line(unit, r))
    print("stacks_on_runs %d" % (warmup + r["pairs"] * block))


def steady(unit, warmup, n, one):
    """Runs one() WARMUP times untimed, then N times timed, synchronized at
    the end of each. Prints "UNITs N cpu_per_step_us C wall_per_step_us W
    faults_per_step F": C is the CPU time of the whole process (every thread)
    over the timed runs, per run, W the wall time per run, F the process's
    minor page faults per run (fresh memory touched: a profiler that maps new
    buffers as it records faults them in inside the program's calls); then
    "timed_window A B": when the
    timed runs began and ended, in seconds of CLOCK_MONOTONIC (the clock
    `perf record -k CLOCK_MONOTONIC` stamps samples with)."""
    for _ in range(warmup):
        one()
    torch.cuda.synchronize()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c = time.process_time()
    t = time.perf_counter()
    start = time.clock_gettime(time.CLOCK_MONOTONIC)
    for _ in range(n):
        one()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
    cpu = time.process_time() - c
    end = time.clock_gettime(time.CLOCK_MONOTONIC)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print("%ss %d cpu_per_step_us %.1f wall_per_step_us %.1f faults_per_step %.2f"
          % (unit, n, cpu * 1e6 / max(n, 1), wall * 1e6 / max(n, 1), faults / max(n, 1)))
    print("timed_window %.6f %.6f" % (start, end))
