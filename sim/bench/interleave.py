"""Times a loop's steps with the injection library's stacks switched off and
on in alternate blocks of one process (the library's
gpuperf_bench_stacks_off), for the benchmarks on the simulated runtime
(hf_model.py) and the GPU check's decode loop (gpu/decode_loop.py).

Both halves of a pair of blocks run within milliseconds of each other, on one
CPU, where two processes see a shared machine's speed move by tens of percent
between them. Blocks alternate off-on, then on-off, so that neither setting
always follows the other; the first step of each block is left out: it
follows the other setting's block, whose caches it inherits.

Each step is timed by its thread's CPU time (the loop's own thread: what a
launch-bound loop's throughput is bound by), the process's (every thread, the
flush thread's work included, which runs every so often rather than per
step), and the wall clock."""
import ctypes
import os
import statistics
import time

CLOCKS = (("thread", time.thread_time_ns), ("process", time.process_time_ns), ("wall", time.perf_counter_ns))


def stacks_switch():
    """The loaded injection library's gpuperf_bench_stacks_off, as a ctypes
    bool; exits with the reason where there is none."""
    path = os.environ.get("CUDA_INJECTION64_PATH")
    try:
        # RTLD_NOLOAD: the library the driver loaded, never a second copy.
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        return ctypes.c_bool.in_dll(lib, "gpuperf_bench_stacks_off")
    except (OSError, TypeError, ValueError) as e:
        raise SystemExit("stacks switched in blocks need the injection library loaded, with "
                         "gpuperf_bench_stacks_off (CUDA_INJECTION64_PATH=%s): %s" % (path, e))


def blocks(one, n, block, sync):
    """Runs one() N times in pairs of blocks of BLOCK steps, stacks off in one
    block of each pair and on in the other, then sync(). Returns {"pairs": P,
    "block": B, "spans": [(START, END, STACKS)], CLOCK: {False: [...], True:
    [...]}}: when each block began and ended (seconds of CLOCK_MONOTONIC,
    STACKS 1 with stacks on), and for each clock the blocks' mean time per
    step in microseconds, stacks off (False) and on (True), pair by pair."""
    if block < 2:
        raise SystemExit("a block needs 2 steps at least (its first is left out), not %d" % block)
    off = stacks_switch()
    pairs = max(n // (2 * block), 1)
    out = {"pairs": pairs, "block": block, "spans": []}
    for name, _ in CLOCKS:
        out[name] = {False: [], True: []}
    try:
        for p in range(pairs):
            for stacks in ((False, True) if p % 2 == 0 else (True, False)):
                off.value = not stacks
                sums = [0] * len(CLOCKS)
                began = time.clock_gettime(time.CLOCK_MONOTONIC)
                for i in range(block):
                    t0 = [c() for _, c in CLOCKS]
                    one()
                    if i > 0:
                        for k, (_, c) in enumerate(CLOCKS):
                            sums[k] += c() - t0[k]
                out["spans"].append((began, time.clock_gettime(time.CLOCK_MONOTONIC), int(stacks)))
                for k, (name, _) in enumerate(CLOCKS):
                    out[name][stacks].append(sums[k] / (block - 1) / 1e3)
    finally:
        off.value = False
    sync()
    return out


def line(unit, r):
    """The result as one line: "interleaved UNITs PAIRS block B" and, for each
    clock, "CLOCK_off_us X CLOCK_on_us Y CLOCK_diffs_us D1 D2 ...": X and Y the
    medians of the blocks' means with stacks off and on, Di each pair's on
    block's mean less its off block's."""
    parts = ["interleaved %ss %d block %d" % (unit, r["pairs"], r["block"])]
    for name, _ in CLOCKS:
        m = r[name]
        parts.append("%s_off_us %.3f %s_on_us %.3f %s_diffs_us %s" % (
            name, statistics.median(m[False]), name, statistics.median(m[True]), name,
            " ".join("%.3f" % (on - of) for of, on in zip(m[False], m[True]))))
    return " ".join(parts)
