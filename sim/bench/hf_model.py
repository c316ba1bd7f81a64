"""What the Hugging Face benchmarks on the simulated runtime share
(hf_train.py, hf_decode.py): their model, a small GPT-2 built from a config
(random weights, 2 layers, nothing downloaded), and how they time a loop.
"""
import ctypes
import os
import resource
import statistics
import time

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
    """Runs one() WARMUP times untimed, then N times in blocks of BLOCK runs,
    with the injection library's stacks off in one block of each pair and on
    in the other (off first in even pairs, on first in odd ones, so that
    neither always follows the other). Setting the library's
    gpuperf_bench_stacks_off switches stacks between launches of one process:
    both halves of a pair run within milliseconds of each other, on one CPU,
    where two processes see a shared machine's speed move by tens of percent
    between them. The first run of each block is left out: it follows the
    other setting's block, whose caches it inherits.

    Each run is timed by its thread's CPU time (the loop's own thread: what a
    launch-bound loop's throughput is bound by) and the process's (every
    thread, the flush thread's work included, which runs every so often
    rather than per run). Prints "interleaved UNITs PAIRS block B
    thread_off_us X thread_on_us Y thread_diffs_us D1 D2 ... process_off_us
    PX process_on_us PY process_diffs_us E1 E2 ...": X and Y the medians of
    the blocks' mean CPU time per run with stacks off and on, Di for each pair
    its on block's mean less its off block's (the shell script takes their
    median); then "stacks_on_runs R": the runs made with stacks on, the
    warmup included (the library's count of captures divided by R is the
    captures per run). With GPUPERF_BENCH_BLOCK_LOG=FILE, appends "START END
    STACKS" for each block to FILE: when it began and ended, in seconds of
    CLOCK_MONOTONIC, and 1 with stacks on (for perf_split.py)."""
    if block < 2:
        raise SystemExit("GPUPERF_BENCH_BLOCK=%d: a block needs 2 runs at least "
                         "(its first is left out)" % block)
    lib_path = os.environ.get("CUDA_INJECTION64_PATH")
    try:
        # RTLD_NOLOAD: the library the driver loaded, never a second copy.
        lib = ctypes.CDLL(lib_path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        off = ctypes.c_bool.in_dll(lib, "gpuperf_bench_stacks_off")
    except (OSError, TypeError, ValueError) as e:
        raise SystemExit("GPUPERF_BENCH_BLOCK needs the injection library loaded, with "
                         "gpuperf_bench_stacks_off (CUDA_INJECTION64_PATH=%s): %s" % (lib_path, e))
    for _ in range(warmup):
        one()
    torch.cuda.synchronize()
    pairs = max(n // (2 * block), 1)
    block_log = os.environ.get("GPUPERF_BENCH_BLOCK_LOG")
    spans = []
    means = {False: [], True: []}
    pmeans = {False: [], True: []}
    for p in range(pairs):
        order = (False, True) if p % 2 == 0 else (True, False)
        for stacks in order:
            off.value = not stacks
            t_sum = p_sum = 0
            began = time.clock_gettime(time.CLOCK_MONOTONIC)
            for i in range(block):
                t = time.thread_time_ns()
                c = time.process_time_ns()
                one()
                if i > 0:
                    t_sum += time.thread_time_ns() - t
                    p_sum += time.process_time_ns() - c
            spans.append((began, time.clock_gettime(time.CLOCK_MONOTONIC), int(stacks)))
            means[stacks].append(t_sum / (block - 1) / 1e3)
            pmeans[stacks].append(p_sum / (block - 1) / 1e3)
    off.value = False
    torch.cuda.synchronize()
    if block_log:
        with open(block_log, "a") as f:
            f.writelines("%.6f %.6f %d\n" % s for s in spans)

    def diffs(m):
        return " ".join("%.3f" % (on - of) for of, on in zip(m[False], m[True]))
    print("interleaved %ss %d block %d thread_off_us %.3f thread_on_us %.3f thread_diffs_us %s "
          "process_off_us %.3f process_on_us %.3f process_diffs_us %s"
          % (unit, pairs, block, statistics.median(means[False]), statistics.median(means[True]),
             diffs(means), statistics.median(pmeans[False]), statistics.median(pmeans[True]),
             diffs(pmeans)))
    print("stacks_on_runs %d" % (warmup + pairs * block))


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
