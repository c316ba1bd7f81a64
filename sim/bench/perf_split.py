"""Splits what stacks add to a loop's thread by the object its CPU time was
spent in, from one process that switched stacks off and on in blocks
(hf_model.py's interleaved, run under `perf record -e cpu-clock -k
CLOCK_MONOTONIC`). Each sample of the loop's thread (the process's first
thread) is put in the block it fell in; per object, and per function of the
program's objects, it prints the samples a block with stacks on had beyond
one with stacks off, on average, and what share of the whole difference
that is. The injection library's share is its own code; the program's
objects' share is their code run slower after captures (the cache lines,
TLB entries and branch history the captures took), and what the library
called there.

usage: python3 perf_split.py BLOCK_LOG SCRIPT_OUTPUT [FUNCTIONS]
  BLOCK_LOG: hf_model.py's GPUPERF_BENCH_BLOCK_LOG; SCRIPT_OUTPUT: `perf
  script -F pid,tid,time,ip,sym,dso`'s output; FUNCTIONS: how many of the
  program's functions that grew most to print (default 10)."""
import bisect
import collections
import re
import sys

LIB = "libgpuperf_inject"


def main(block_log, script, functions=10):
    blocks = []
    for n, line in enumerate(open(block_log), 1):
        try:
            start, end, on = line.split()
            blocks.append((float(start), float(end), int(on)))
        except ValueError:
            sys.exit("perf_split.py: %s:%d: not \"START END STACKS\": %r" % (block_log, n, line))
    blocks.sort()
    starts = [b[0] for b in blocks]
    count = {0: sum(1 for b in blocks if b[2] == 0), 1: sum(1 for b in blocks if b[2] == 1)}
    if not count[0] or not count[1]:
        sys.exit("perf_split.py: %s: blocks with stacks on and off are both needed" % block_log)
    by_object = {0: collections.Counter(), 1: collections.Counter()}
    by_function = {0: collections.Counter(), 1: collections.Counter()}
    sample = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*?)\s+\(([^)]*)\)\s*$")
    for line in open(script, errors="replace"):
        m = sample.match(line)
        if not m or m.group(1) != m.group(2):
            continue
        t = float(m.group(3))
        i = bisect.bisect_right(starts, t) - 1
        if i < 0 or t > blocks[i][1]:
            continue
        on = blocks[i][2]
        obj = m.group(5).rsplit("/", 1)[-1]
        by_object[on][obj] += 1
        by_function[on][(obj, re.sub(r"\+0x[0-9a-f]+$", "", m.group(4)))] += 1

    def per_block(counter, on):
        return {k: v / count[on] for k, v in counter[on].items()}

    def diff(counter):
        off, on = per_block(counter, 0), per_block(counter, 1)
        return sorted(((on.get(k, 0) - off.get(k, 0), k, off.get(k, 0), on.get(k, 0))
                       for k in set(off) | set(on)), reverse=True)

    total = {on: sum(by_object[on].values()) / count[on] for on in (0, 1)}
    added = total[1] - total[0]
    print("loop thread: %.1f samples a block with stacks off, %.1f with stacks on (%+.1f, %+.2f %%); "
          "%d blocks off, %d on" % (total[0], total[1], added, 100 * added / total[0], count[0], count[1]))
    if added <= 0:
        print("stacks added nothing measurable")
        return
    rows = diff(by_object)
    own = sum(d for d, k, _, _ in rows if LIB in k)
    print("the injection library's own code: %+.2f samples a block, %.0f %% of what stacks add" % (own, 100 * own / added))
    print("the program's objects: %+.2f samples a block, %.0f %%" % (added - own, 100 * (added - own) / added))
    for d, k, off, on in rows:
        if abs(d) >= 0.05 * abs(added) or LIB in k:
            print("  %-40s %+7.2f  (%.2f -> %.2f)" % (k[:40], d, off, on))
    print("the program's functions that grew most:")
    for d, (obj, fn), off, on in [r for r in diff(by_function) if LIB not in r[1][0]][:functions]:
        print("  %+6.2f  %s (%s)" % (d, fn[:70], obj))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:]))
