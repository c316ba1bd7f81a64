#!/usr/bin/env bash
# Simulated CUDA (no GPU: kernels do not run) benchmark: what stacks cost per
# launch over `--gpu-only`, both timed in one process. hf_train.sh runs the
# variants as separate processes, two at once; on a shared machine single
# rounds of those still spread by tens of percent, more than what a capture
# costs. Here each run is one process of the stacks variant whose loop
# (sim/bench/hf_train.py or, with LOOP=decode, hf_decode.py) switches the
# injection library's stacks off and on in alternate blocks of BLOCK steps
# (GPUPERF_BENCH_BLOCK, the library's gpuperf_bench_stacks_off; see
# hf_model.py's interleaved): a pair of blocks runs within milliseconds, on
# one CPU, so the machine's speed is the same for both halves.
#
# What stacks cost here is the loop thread's CPU time (and the process's, the
# flush thread's included) with stacks on less with stacks off, per pair of
# blocks; it prints, over every pair of every run, the median and quartiles,
# per step and per capture (the library's captures over the steps run with
# stacks on), and the throughput lost per CPU-second of the loop's thread
# (the median on-less-off over the median off). What it cannot show: what
# `--gpu-only` costs over no injection (hf_train.sh's plain:gpuonly pair), and
# the first run of each block is left out, so a capture's state is as warm as
# in a steady loop.
#
# With PERF=1 (perf on PATH) one more run, under perf (cpu-clock, 10 kHz),
# splits what stacks add to the loop's thread by the object the CPU time went
# to (sim/bench/perf_split.py): the library's own code, and the program's code
# run slower after each capture (the cache lines, TLB entries and branch
# history the captures took).
#
# usage: bash sim/bench/hf_interleaved.sh OUTDIR [RUNS [STEPS]]
#        (RUNS processes, default 3, of STEPS timed steps each, 200 for the
#        training loop, 2000 for LOOP=decode; BLOCK steps a block, default 8; LOOP=train,
#        default, or decode; PYTHON, INJECT as hf_train.sh; PERF=1)
set -euo pipefail
out=${1:?usage: bash sim/bench/hf_interleaved.sh OUTDIR [RUNS [STEPS]]}
runs=${2:-3}
loop=${LOOP:-train}
case $loop in
    train) steps=${3:-200} ;;
    decode) steps=${3:-2000} ;;
    *) echo "hf_interleaved.sh: LOOP=$loop is neither train nor decode" >&2; exit 2 ;;
esac
block=${BLOCK:-8}
repo=$(cd "$(dirname "$0")/../.." && pwd)
inject=${INJECT:-$repo/target/release/libgpuperf_inject.so}
baseline=
python=${PYTHON:-python3}
export PYTHONHASHSEED=${PYTHONHASHSEED:-0} OMP_NUM_THREADS=1
script=$repo/sim/bench/hf_$loop.py
unit=step
[ "$loop" = train ] || unit=token
[ -f "$inject" ] || { echo "hf_interleaved.sh: $inject missing (cargo build --release -p gpuperf-inject, or set INJECT)" >&2; exit 2; }
[ "${PERF:-0}" != 1 ] || command -v perf > /dev/null || { echo "hf_interleaved.sh: PERF=1 needs perf on PATH" >&2; exit 2; }
"$python" -c 'import torch, transformers' 2> /dev/null || { echo "hf_interleaved.sh: $python lacks torch or transformers (set PYTHON)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$repo/sim/bench/variant.sh"

echo "Hugging Face GPT-2 ($loop loop) on the simulated runtime (its driver callback path $(cat "$out/dispatch-unwind" 2> /dev/null || echo "of unknown build")), stacks off and on in one process, $runs runs of $steps ${unit}s ($("$python" -c 'import platform, torch, transformers; print("CPython", platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__)'); load average at start $(cut -d' ' -f1-3 /proc/loadavg))"
: > "$work/thread"
: > "$work/process"
: > "$work/per_capture"
for r in $(seq 1 "$runs"); do
    GPUPERF_BENCH_BLOCK=$block in_variant stacks bash "$repo/sim/run.sh" "$out" -- \
        "$python" "$script" 3 "$steps" > "$work/stdout" 2> "$work/stderr" || {
        echo "hf_interleaved.sh: run $r failed:" >&2
        tail -n 20 "$work/stderr" >&2
        exit 1
    }
    line=$(grep '^interleaved ' "$work/stdout") || { echo "hf_interleaved.sh: run $r printed no times" >&2; exit 1; }
    on_runs=$(sed -n 's/^stacks_on_runs //p' "$work/stdout")
    taken=$(sed -n 's/.* stacks: \([0-9]*\) taken.*/\1/p' "$work/log" | head -1)
    frames=$(sed -n 's/.* \([0-9.]*\) frames per capture.*/\1/p' "$work/log" | head -1)
    # Captures taken whole (proven the same as one kept), and of those, taken
    # on the loop thread's own stack (without the switch to the unwinder's).
    whole=$(sed -n 's/.* \([0-9]*\) of them the whole capture.*/\1/p' "$work/log" | head -1)
    own=$(sed -n "s/.* \([0-9]*\) of those on the calling thread's own stack.*/\1/p" "$work/log" | head -1)
    shares=$(awk -v t="$taken" -v w="${whole:-0}" -v o="${own:-0}" 'BEGIN { printf "%.1f %% taken whole, %.1f %% on the caller'"'"'s stack", 100 * w / t, 100 * o / t }')
    per=$(awk -v t="$taken" -v n="$on_runs" 'BEGIN { printf "%.2f", t / n }')
    echo "$per" >> "$work/per_capture"
    # The pairs' differences, one a line.
    sed 's/.* thread_diffs_us \(.*\) process_off_us.*/\1/' <<< "$line" | tr ' ' '\n' >> "$work/thread"
    sed 's/.* process_diffs_us \(.*\) wall_off_us.*/\1/' <<< "$line" | tr ' ' '\n' >> "$work/process"
    off=$(sed 's/.* thread_off_us \([0-9.]*\).*/\1/' <<< "$line")
    echo "$off" >> "$work/thread_off"
    sed 's/.* process_off_us \([0-9.]*\).*/\1/' <<< "$line" >> "$work/process_off"
    median_run=$(sed 's/.* thread_diffs_us \(.*\) process_off_us.*/\1/' <<< "$line" | tr ' ' '\n' | median)
    printf 'run %d: %s pairs of %d-%s blocks, %s captures a %s (%s frames a stack; %s); loop thread: %s us a %s with stacks off, stacks %+.3f us a %s (median of its pairs)\n' \
        "$r" "$(awk '{ print $3 }' <<< "$line")" "$block" "$unit" "$per" "$unit" "${frames:--}" "$shares" "$off" "$unit" "$median_run" "$unit"
done

# quantiles FILE: "Q1 MEDIAN Q3" of FILE's column.
quantiles() {
    sort -g "$1" | awk '{ v[NR] = $1 } END { q = NR - 1; printf "%.3f %.3f %.3f\n", v[int(q / 4) + 1], v[int(q / 2) + 1], v[int(3 * q / 4) + 1] }'
}
per=$(median < "$work/per_capture")
for what in thread process; do
    read -r q1 med q3 < <(quantiles "$work/$what")
    off=$(median < "$work/${what}_off")
    awk -v w="$what" -v q1="$q1" -v m="$med" -v q3="$q3" -v off="$off" -v per="$per" -v u="$unit" -v n="$(wc -l < "$work/$what")" 'BEGIN {
        name = (w == "thread") ? "the loop thread'"'"'s CPU time" : "the process'"'"'s CPU time (every thread)"
        printf "stacks over --gpu-only, %s, %d pairs: %+.0f ns a capture (quartiles %+.0f, %+.0f), %+.2f us a %s, %.2f %% of a %s with stacks off (%.1f us): %.2f %% fewer %ss per CPU-second\n",
            name, n, m * 1000 / per, q1 * 1000 / per, q3 * 1000 / per, m, u, 100 * m / off, u, off, 100 * (1 - off / (off + m)), u
    }'
done

[ "${PERF:-0}" = 1 ] || exit 0
echo "under perf, one run of $steps ${unit}s:"
GPUPERF_BENCH_BLOCK=$block GPUPERF_BENCH_BLOCK_LOG=$work/blocks in_variant stacks bash "$repo/sim/run.sh" "$out" -- \
    perf record -q -e cpu-clock -F 10000 -k CLOCK_MONOTONIC -o "$work/perf.data" \
    "$python" "$script" 3 "$steps" > "$work/stdout" 2> "$work/stderr" || {
    echo "hf_interleaved.sh: the run under perf failed:" >&2
    tail -n 20 "$work/stderr" >&2
    exit 1
}
perf script -i "$work/perf.data" -F pid,tid,time,ip,sym,dso > "$work/script" 2> /dev/null
"$python" "$repo/sim/bench/perf_split.py" "$work/blocks" "$work/script"
