#!/usr/bin/env bash
# Simulated CUDA (no GPU: kernels do not run) benchmark: the CPU time that the
# injection library adds to each launch of a launch-bound loop, by stack depth
# (sim/bench/stack_depth.py: empty-kernel launches through ctypes at the bottom
# of nested Python functions, some of them calling the next through a C
# builtin, so that native interpreter frames lie between the Python frames as in
# a PyTorch model). For each case its variants are: no injection; the
# injection library with stacks off (what `gpuperf record --gpu-only`
# injects); with stacks on (what `gpuperf record` injects); and, with
# BASELINE_INJECT set to another build of the library (e.g. of main), that
# library with stacks on. Where the process may use two CPUs, RUNS rounds of
# pairs run at once, one on each CPU (gpuonly beside plain, stacks beside
# gpuonly, stacks beside baseline; see variant.sh), and each pair's
# difference is taken within its round; else (or with PAIRED=0) RUNS runs of
# each, alternating. It prints the medians of the process's CPU time per
# launch (all its threads; unlike the wall time it does not count waiting for a
# CPU on a busy machine), what stacks add, the depth of the recorded stack
# (frames kept per capture, from the library's log) and the share of captures
# that reused part of the thread's last one (native frames; Python frames where
# the library counts them). Then, unless MEMORY=0, one run of
# 1,000,000 launches at the Hugging Face shape: the process's peak resident set
# without injection and with stacks, and the size of the trace.
#
# Cases are PYFRAMES:HOP (see stack_depth.py). The default: the shape of a small
# Hugging Face model's training loop (30 Python frames over about 44 native ones
# on CPython 3.11, every second Python call made through C), then 31, 60, 91
# and 151 frames on CPython 3.12 (10, 32, 55 and 100 Python frames) with a C hop
# every third Python frame. The depths are measured (frames kept per capture,
# from the library's log) and printed.
#
# With IR=1 it also counts, for each case and variant, the instructions each
# launch executes in the process (valgrind's callgrind, runs of IR_LAUNCHES and
# 3 x IR_LAUNCHES launches, the difference divided by the launches between): a
# figure that, unlike CPU time, does not move with the load of a shared machine.
#
# With INTERLEAVE=1 each case also runs RUNS processes of the stacks variant
# that switch stacks off and on in alternate blocks of 8 steps of 100 launches
# (stack_depth.py, interleave.py), and prints what stacks add per launch over
# `--gpu-only` within one process: the median and quartiles over every pair of
# blocks, steadier than pairs of processes.
#
# usage: bash sim/bench/stack_depth.sh OUTDIR [RUNS [LAUNCHES]]
#        (INJECT=the injection library, default target/release/libgpuperf_inject.so;
#        BASELINE_INJECT=a library to compare it with; PYTHON=a CPython 3.10-3.13,
#        default python3; CASES="30:3 10:3 ..." to choose the cases; IR=1,
#        IR_LAUNCHES=2000; MEMORY=0 skips the 1 M launch run; PAIRED=0 for
#        runs one after another; INTERLEAVE=1)
set -euo pipefail
out=${1:?usage: bash sim/bench/stack_depth.sh OUTDIR [RUNS [LAUNCHES]]}
runs=${2:-5}
launches=${3:-200000}
repo=$(cd "$(dirname "$0")/../.." && pwd)
inject=${INJECT:-$repo/target/release/libgpuperf_inject.so}
baseline=${BASELINE_INJECT:-}
python=${PYTHON:-python3}
# One hash seed for every run: string hashing, and with it the interpreter's
# work per step, otherwise differs from run to run.
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
cases=${CASES:-30:2 10:3 32:3 55:3 100:3}
script=$repo/sim/bench/stack_depth.py
[ -f "$inject" ] || { echo "stack_depth.sh: $inject missing (cargo build --release -p gpuperf-inject, or set INJECT)" >&2; exit 2; }
[ -z "$baseline" ] || [ -f "$baseline" ] || { echo "stack_depth.sh: BASELINE_INJECT=$baseline is not a file" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$repo/sim/bench/variant.sh"

# run VARIANT PYFRAMES HOP LAUNCHES: one run; prints the CPU us per launch.
run() {
    in_variant "$1" bash "$repo/sim/run.sh" "$out" -- "$python" "$script" "$2" "$3" "$4" 2> "$work/stderr" |
        sed -n 's/.* cpu_per_launch_us \([0-9.]*\) .*/\1/p'
    if [ "$1" = stacks ] || [ "$1" = baseline ]; then
        # The log's lines start with the library's name and the pid.
        grep -m1 ' stacks: [0-9]* taken' "$work/log" | sed 's/.* stacks: /stacks: /' > "$work/stacks.$1" || true
    fi
}
# The stacks line's "N frames per capture" and "N reused part of the last capture".
depth() { sed -n 's/.* \([0-9.]*\) frames per capture.*/\1/p' "$work/stacks.$1" 2> /dev/null | grep . || echo "n/a"; }
# The share of captures that reused native frames, and (from libraries that
# count them) Python frames, of an earlier capture of the thread, and that were
# a whole capture kept for the stack expected (proven, not walked).
reused() {
    local t r p w
    t=$(sed -n 's/^stacks: \([0-9]*\) taken.*/\1/p' "$work/stacks.$1" 2> /dev/null)
    r=$(sed -n 's/.* \([0-9]*\) reused part of the last capture.*/\1/p' "$work/stacks.$1" 2> /dev/null)
    p=$(sed -n 's/.* \([0-9]*\) reused their outer Python frames.*/\1/p' "$work/stacks.$1" 2> /dev/null)
    w=$(sed -n 's/.* \([0-9]*\) of them the whole capture.*/\1/p' "$work/stacks.$1" 2> /dev/null)
    [ -n "$t" ] && [ -n "$r" ] && awk -v t="$t" -v r="$r" -v p="$p" -v w="$w" 'BEGIN {
        printf "%.1f %% native", 100 * r / t
        if (p != "") printf ", %.1f %% Python", 100 * p / t
        if (w != "") printf ", %.1f %% whole (kept, not walked)", 100 * w / t }' || echo "n/a"
}

# ir VARIANT PYFRAMES HOP LAUNCHES: the instructions the process executes.
ir() {
    # The interpreter itself, not a launcher script (pyenv's shims are).
    local exe
    exe=$("$python" -c 'import sys; print(sys.executable)')
    rm -f "$work"/cg.*
    in_variant "$1" bash "$repo/sim/run.sh" "$out" -- valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
        "$exe" "$script" "$2" "$3" "$4" 2>&1 | sed -n 's/.*I *refs: *//p' | tr -d ,
}

variants="plain gpuonly stacks${baseline:+ baseline}"
run plain 3 0 1000 > /dev/null # builds OUTDIR if needed, warms the page cache
how="$runs runs of each variant alternating"
[ "$paired" = 0 ] || how="$runs rounds of pairs run at once on CPUs ${cpus[0]} and ${cpus[1]}, the differences taken within each pair"
echo "launch-bound loop on the simulated runtime (its driver callback path $(cat "$out/dispatch-unwind" 2> /dev/null || echo "of unknown build")), $launches launches per run, $how (medians of the process's CPU time per launch; $("$python" -c 'import platform; print("CPython", platform.python_version())'); load average at start $(cut -d' ' -f1-3 /proc/loadavg))"
for c in $cases; do
    py=${c%%:*}
    hop=${c##*:}
    for v in $variants; do : > "$work/$v"; done
    for p in $pairs; do : > "$work/diff.$p"; done
    for r in $(seq "$runs"); do
        if [ "$paired" = 0 ]; then
            for v in $variants; do run "$v" "$py" "$hop" "$launches" >> "$work/$v"; done
            continue
        fi
        for p in $pairs; do
            x=${p%:*}
            y=${p#*:}
            at_once "$r" "$work/x" "$work/y" -- run "$x" "$py" "$hop" "$launches" -- run "$y" "$py" "$hop" "$launches"
            # Each run left its log's stacks line in its own directory: moved,
            # so that none is read again for a later case.
            for f in "$work"/cpu*/stacks.*; do
                [ ! -e "$f" ] || mv -f "$f" "$work/"
            done
            [ -s "$work/x" ] && [ -s "$work/y" ] || { echo "stack_depth.sh: a paired run of $x and $y printed no CPU time" >&2; exit 1; }
            cat "$work/x" >> "$work/$x"
            cat "$work/y" >> "$work/$y"
            awk -v a="$(cat "$work/x")" -v b="$(cat "$work/y")" 'BEGIN { printf "%+.0f\n", (b - a) * 1000 }' >> "$work/diff.$p"
        done
    done
    p=$(median < "$work/plain")
    line="  $py Python frames (hop $hop), $(depth stacks) frames per stack:"
    for v in $variants; do
        m=$(median < "$work/$v")
        line="$line $v $m us"
        [ "$v" = plain ] || line="$line (+$(awk -v a="$p" -v b="$m" 'BEGIN { printf "%.0f", (b - a) * 1000 }') ns)"
    done
    echo "$line; reused part of the last capture: $(reused stacks)${baseline:+ (baseline: $(reused baseline))}"
    if [ "$paired" = 1 ]; then
        line="    within each pair:"
        for p in $pairs; do line="$line ${p#*:} over ${p%:*} $(balanced "$work/diff.$p" %+.0f) ns (median of the means of two rounds, the CPUs swapped; rounds: $(rounds "$work/diff.$p"));"; done
        echo "${line%;}"
    fi
    echo "    runs: $(for v in $variants; do printf '%s [%s] ' "$v" "$(rounds "$work/$v")"; done)"
    if [ "${INTERLEAVE:-0}" = 1 ]; then
        : > "$work/inter"
        for r in $(seq "$runs"); do
            GPUPERF_BENCH_BLOCK=8 in_variant stacks bash "$repo/sim/run.sh" "$out" -- \
                "$python" "$script" "$py" "$hop" "$launches" > "$work/inter.out" 2> "$work/stderr" || {
                echo "stack_depth.sh: an interleaved run failed:" >&2
                tail -n 20 "$work/stderr" >&2
                exit 1
            }
            per=$(sed -n 's/^launches_per_step //p' "$work/inter.out")
            sed -n 's/.* thread_diffs_us \(.*\) process_off_us.*/\1/p' "$work/inter.out" | tr ' ' '\n' |
                awk -v k="$per" '{ printf "%.1f\n", $1 * 1000 / k }' >> "$work/inter"
        done
        sort -g "$work/inter" | awk '{ v[NR] = $1 } END { q = NR - 1
            printf "    in one process (stacks off and on in alternate blocks): stacks over gpuonly %+.0f ns a launch (quartiles %+.0f, %+.0f; %d pairs of blocks)\n", v[int(q / 2) + 1], v[int(q / 4) + 1], v[int(3 * q / 4) + 1], NR }'
    fi
    if [ "${IR:-0}" = 1 ]; then
        n=${IR_LAUNCHES:-2000}
        line="    instructions per launch (callgrind):"
        for v in $variants; do
            a=$(ir "$v" "$py" "$hop" "$n")
            b=$(ir "$v" "$py" "$hop" $((3 * n)))
            i=$(((b - a) / (2 * n)))
            [ "$v" = plain ] && base=$i
            line="$line $v $i"
            [ "$v" = plain ] || line="$line (+$((i - base)))"
        done
        echo "$line"
    fi
done
echo "  load average at end $(cut -d' ' -f1-3 /proc/loadavg)"

[ "${MEMORY:-1}" = 0 ] && exit 0
# Peak resident set of 1 M launches at the first case's shape, without and with
# stacks (VmHWM, polled until the process exits).
c=${cases%% *}
hwm() {
    local lib=${1:-} hwm=0 k pid
    rm -f "$work"/trace* "$work/log"
    ${lib:+env CUDA_INJECTION64_PATH="$lib" GPUPERF_CUPTI_PATH="$out/libcupti.so.13" \
        GPUPERF_GPU_TRACE="$work/trace.gputrace" GPUPERF_INJECT_LOG="$work/log" GPUPERF_STACKS=1} \
        bash "$repo/sim/run.sh" "$out" -- "$python" "$script" "${c%%:*}" "${c##*:}" 1000000 > /dev/null &
    pid=$!
    while kill -0 "$pid" 2> /dev/null; do
        for p in $(pgrep -P "$pid") "$pid"; do
            k=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$p/status" 2> /dev/null || true)
            [ -n "$k" ] && [ "$k" -gt "$hwm" ] && hwm=$k
        done
        sleep 0.2
    done
    wait "$pid"
    echo "$((hwm / 1024))"
}
a=$(hwm)
b=$(hwm "$inject")
echo "  1,000,000 launches (case $c): peak RSS $a MiB without injection, $b MiB with stacks; trace $(du -cm "$work"/trace* | tail -1 | cut -f1) MiB"
