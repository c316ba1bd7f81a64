#!/usr/bin/env bash
# Simulated CUDA (no GPU: kernels do not run) benchmark: the CPU time that
# `gpuperf record` adds to each launch of a launch-bound PyTorch loop under 30
# Python frames (crates/inject/bench/launch_loop.py: N in-place adds on a
# one-element tensor), on the simulated runtime built in OUTDIR. Runs the loop
# RUNS times without and RUNS times with `gpuperf record` (stacks taken in the
# program, the default), alternating, and prints the medians of the loop's own
# per-launch time and their difference, in wall time and in the process's CPU
# time (all its threads; on a busy machine the wall time also counts waiting
# for a CPU, the CPU time does not). Then one recorded run of 1,000,000
# launches: gpuperf's peak resident memory and the size of the raw recording.
#
# The simulated kernel of a one-element add costs 1001 ns of simulated GPU time,
# less than the host spends launching it, so the loop measures the host's time
# per launch. Numbers depend on the machine; run it on an otherwise idle one.
#
# With BASELINE_INJECT set to another build of the injection library (e.g. of
# the previous commit), each round also runs `gpuperf record` with that library
# (GPUPERF_INJECT_LIB), so that old and new are compared in the same rounds.
#
# usage: bash sim/bench/torch_launch_overhead.sh OUTDIR [RUNS [LAUNCHES]]
#        (GPUPERF=path/to/gpuperf, PYTHON=a python with torch 2.11-2.14 for CUDA 13,
#        GPUPERF_INJECT_LIB=the library `gpuperf record` injects, default its own,
#        BASELINE_INJECT=a library to compare it with)
set -euo pipefail
out=${1:?usage: bash sim/bench/torch_launch_overhead.sh OUTDIR [RUNS [LAUNCHES]]}
runs=${2:-7}
launches=${3:-200000}
repo=$(cd "$(dirname "$0")/../.." && pwd)
gpuperf=${GPUPERF:-$repo/target/release/gpuperf}
python=${PYTHON:-python3}
[ -x "$gpuperf" ] || { echo "torch_launch_overhead.sh: $gpuperf missing (cargo build --release -p gpuperf, or set GPUPERF)" >&2; exit 2; }
loop=$repo/crates/inject/bench/launch_loop.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

plain() { bash "$repo/sim/run.sh" "$out" -- "$python" "$loop" "$1"; }
recorded() {
    (cd "$work" && rm -rf raw && ${lib:+env GPUPERF_INJECT_LIB="$lib"} "$gpuperf" record -q --raw-dir raw --cupti "$out/libcupti.so.13" -o "$work/f.svg" \
        -- bash "$repo/sim/run.sh" "$out" -- "$python" "$loop" "$1")
}
per_launch() { sed -n 's/.* per_launch_us \([0-9.]*\) cpu_per_launch_us \([0-9.]*\).*/\1 \2/p'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

baseline=${BASELINE_INJECT:-}
[ -z "$baseline" ] || [ -f "$baseline" ] || { echo "torch_launch_overhead.sh: BASELINE_INJECT=$baseline is not a file" >&2; exit 2; }
lib=${GPUPERF_INJECT_LIB:-}
plain 1000 > /dev/null # builds OUTDIR if needed, warms the page cache
: > "$work/plain" && : > "$work/recorded" && : > "$work/baseline"
for i in $(seq "$runs"); do
    plain "$launches" | per_launch >> "$work/plain"
    lib=${GPUPERF_INJECT_LIB:-} recorded "$launches" | per_launch >> "$work/recorded"
    if [ -n "$baseline" ]; then
        lib=$baseline recorded "$launches" | per_launch >> "$work/baseline"
    fi
done
echo "launch-bound PyTorch loop, $launches launches under 30 Python frames, $runs runs each (medians; load average $(cut -d' ' -f1-3 /proc/loadavg)):"
for col in 1 2; do
    what=$([ $col = 1 ] && echo "wall time" || echo "CPU time")
    cut -d' ' -f$col "$work/plain" > "$work/p$col"
    cut -d' ' -f$col "$work/recorded" > "$work/r$col"
    a=$(median < "$work/p$col")
    b=$(median < "$work/r$col")
    echo "  $what without gpuperf: $a us per launch ($(tr '\n' ' ' < "$work/p$col"))"
    echo "  $what with gpuperf record: $b us per launch ($(tr '\n' ' ' < "$work/r$col"))"
    awk -v a="$a" -v b="$b" -v w="$what" 'BEGIN { printf "  added by gpuperf record (%s): %.3f us per launch\n", w, b - a }'
    if [ -n "$baseline" ]; then
        cut -d' ' -f$col "$work/baseline" > "$work/b$col"
        c=$(median < "$work/b$col")
        echo "  $what with the baseline library: $c us per launch ($(tr '\n' ' ' < "$work/b$col"))"
        awk -v a="$a" -v c="$c" -v w="$what" 'BEGIN { printf "  added by the baseline library (%s): %.3f us per launch\n", w, c - a }'
    fi
done

# gpuperf's own peak (VmHWM, read until it exits), not its children's.
rm -rf "$work/raw"
(cd "$work" && exec "$gpuperf" record -q --raw-dir raw --cupti "$out/libcupti.so.13" -o "$work/f.svg" \
    -- bash "$repo/sim/run.sh" "$out" -- "$python" "$loop" 1000000 > /dev/null) &
pid=$!
hwm=0
while kill -0 "$pid" 2> /dev/null; do
    k=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2> /dev/null || true)
    [ -n "$k" ] && hwm=$k
    sleep 0.2
done
wait "$pid"
echo "  1,000,000 launches recorded: gpuperf peak RSS $((hwm / 1024)) MiB, raw recording $(du -sm "$work/raw" | cut -f1) MiB"
