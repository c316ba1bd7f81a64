#!/usr/bin/env bash
# What `gpuperf record --pc-sampling` costs a launch-bound loop, on gpuperf's
# SIMULATED CUDA runtime (sim/): N launches of an empty kernel
# (crates/inject/bench/launch_loop.cu), timed by the loop itself, without
# gpuperf, under `gpuperf record`, and under `gpuperf record --pc-sampling`
# (default window, or PC_WINDOW), rounds alternating; prints the medians and
# their ratios. On the simulation no kernel runs and none is serialized, so
# this measures the host side only: the launch callback's window bookkeeping,
# GetData and the samples' records. The simulated kernels take no time there
# (GPUSIM_TIME_SCALE=0 unless set): with the default scale each empty kernel
# takes 1 µs of simulated GPU time, and the loop's final synchronize waits for
# that queue, which hides any host work under 1 µs a launch. On a GPU, run it
# with the real libraries (SIM unset) to add what serialized kernels cost.
#
# usage: pc_sampling_overhead.sh [LAUNCHES=20000] [ROUNDS=5]
# env:   GPUPERF    the gpuperf binary (default target/release/gpuperf, else target/debug)
#        SIM        the simulated runtime's build directory (sim/build.sh DIR);
#                   unset: the real CUDA libraries
#        LAUNCH_LOOP a prebuilt launch_loop (else built with $NVCC, -cudart shared,
#                   and -L$CUDA_LIB, the wheels' lib directory, when set)
#        PC_WINDOW  --pc-sampling-window's value (default: gpuperf's)
#        PC_BUDGET  --pc-sampling-budget's value (default: gpuperf's)
#        GPUSIM_PC_SERIALIZED_COST_US  on the simulation: what each sampled
#                   launch costs (about 800 on an H200), to see the budget work
set -euo pipefail
n=${1:-20000}
rounds=${2:-5}
root=$(cd "$(dirname "$0")/../../.." && pwd)
gpuperf=${GPUPERF:-$root/target/release/gpuperf}
[ -x "$gpuperf" ] || gpuperf=$root/target/debug/gpuperf
[ -x "$gpuperf" ] || { echo "pc_sampling_overhead: no gpuperf: cargo build -p gpuperf" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${LAUNCH_LOOP:-}
if [ -z "$bin" ]; then
    bin=$work/launch_loop
    "${NVCC:-nvcc}" -O2 -arch=sm_90 -cudart shared ${SIM:+-L"$SIM"} ${CUDA_LIB:+-L"$CUDA_LIB"} \
        -o "$bin" "$root/crates/inject/bench/launch_loop.cu"
fi
label="GPU"
record=("$gpuperf" record -q --stacks inject)
if [ -n "${SIM:-}" ]; then
    label="SIMULATED GPU (sim/: no kernel runs or is serialized)"
    export LD_LIBRARY_PATH=$SIM${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    record+=(--cupti "$SIM/libcupti.so.13")
    export GPUSIM_TIME_SCALE=${GPUSIM_TIME_SCALE:-0}
    label+="; GPUSIM_TIME_SCALE=$GPUSIM_TIME_SCALE"
    [ -z "${GPUSIM_PC_SERIALIZED_COST_US:-}" ] || label+="; GPUSIM_PC_SERIALIZED_COST_US=$GPUSIM_PC_SERIALIZED_COST_US"
fi
pc=(--pc-sampling ${PC_WINDOW:+--pc-sampling-window="$PC_WINDOW"} ${PC_BUDGET:+--pc-sampling-budget="$PC_BUDGET"})

# The loop's own time (the program prints it), from a fresh directory each run.
seconds() {
    local d
    d=$(mktemp -d -p "$work")
    (cd "$d" && "$@" "$bin" "$n") | awk '$1 == "launches" { print $4 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$work/base"
: >"$work/rec"
: >"$work/pc"
for ((r = 1; r <= rounds; r++)); do
    seconds env >>"$work/base"
    seconds "${record[@]}" -- >>"$work/rec"
    seconds "${record[@]}" "${pc[@]}" -- >>"$work/pc"
done
base=$(median <"$work/base")
rec=$(median <"$work/rec")
pcs=$(median <"$work/pc")
echo "$label; launches per run: $n, rounds: $rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "gpuperf: $gpuperf"
echo "without gpuperf:          median $base s ($(paste -sd' ' "$work/base"))"
echo "record:                   median $rec s ($(paste -sd' ' "$work/rec"))"
echo "record --pc-sampling${PC_WINDOW:+ --pc-sampling-window=$PC_WINDOW}${PC_BUDGET:+ --pc-sampling-budget=$PC_BUDGET}: median $pcs s ($(paste -sd' ' "$work/pc"))"
ratio() {
    awk -v a="$1" -v b="$2" -v n="$n" -v what="$3" \
        'BEGIN { printf "%s: ratio %.3f, %+.0f ns per launch\n", what, a / b, (a - b) * 1e9 / n }'
}
ratio "$rec" "$base" "record"
ratio "$pcs" "$base" "record --pc-sampling"
ratio "$pcs" "$rec" "PC sampling alone"
