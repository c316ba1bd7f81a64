#!/usr/bin/env bash
# Injection overhead on a launch-bound loop, on a machine with a GPU: N launches of
# an empty kernel (launch_loop.cu), timed without gpuperf's injection library,
# with it and its in-process stacks off (GPUPERF_STACKS=0), and with it as it runs
# by default (stacks on), rounds alternating; prints the medians and their ratios
# (goal: <= 1.10).
#
# With PYTHON set, the same loop runs from PyTorch under 30 Python frames
# (launch_loop.py), so that the last ratio is what Python stacks cost on a GPU.
#
# usage: launch-overhead.sh [LAUNCHES=200000] [ROUNDS=5]
# env:   LAUNCH_LOOP  a prebuilt launch_loop binary (else built with $NVCC, default nvcc)
#        PYTHON       a Python with PyTorch (CUDA): time launch_loop.py instead
#        INJECT       the library (default target/release/libgpuperf_inject.so)
#
# It also runs on gpuperf's simulated runtime (sim/README.md: LD_LIBRARY_PATH to
# the simulated libraries, GPUPERF_CUPTI_PATH to its libcupti, LAUNCH_LOOP built
# with `nvcc -cudart shared` against them), which checks the script, not the
# overhead.
set -euo pipefail
n=${1:-200000}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
inject=${INJECT:-$here/../../../target/release/libgpuperf_inject.so}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${LAUNCH_LOOP:-}
if [ -n "${PYTHON:-}" ]; then
    loop=("$PYTHON" "$here/launch_loop.py")
elif [ -n "$bin" ]; then
    loop=("$bin")
else
    bin=$work/launch_loop
    "${NVCC:-nvcc}" -O2 -o "$bin" "$here/launch_loop.cu"
    loop=("$bin")
fi
[ -f "$inject" ] || { echo "launch-overhead: $inject not found; run cargo build --release -p gpuperf-inject" >&2; exit 2; }

seconds() { "$@" "${loop[@]}" "$n" | awk '$1 == "launches" { print $4 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$work/base"
: >"$work/nostacks"
: >"$work/inj"
for ((r = 1; r <= rounds; r++)); do
    seconds env >>"$work/base"
    mkdir -p "$work/plain$r" "$work/trace$r"
    seconds env CUDA_INJECTION64_PATH="$inject" GPUPERF_GPU_TRACE="$work/plain$r/" \
        GPUPERF_STACKS=0 >>"$work/nostacks"
    seconds env CUDA_INJECTION64_PATH="$inject" GPUPERF_GPU_TRACE="$work/trace$r/" >>"$work/inj"
done
base=$(median <"$work/base")
nostacks=$(median <"$work/nostacks")
inj=$(median <"$work/inj")
echo "launches per run: $n, rounds: $rounds"
echo "without injection:         median $base s ($(paste -sd' ' "$work/base"))"
echo "with injection, no stacks: median $nostacks s ($(paste -sd' ' "$work/nostacks"))"
echo "with injection and stacks: median $inj s ($(paste -sd' ' "$work/inj"))"
ratio() {
    awk -v a="$1" -v b="$2" -v n="$n" -v what="$3" \
        'BEGIN { printf "%s: ratio %.3f, %+.0f ns per launch\n", what, a / b, (a - b) * 1e9 / n }'
}
ratio "$nostacks" "$base" "injection"
ratio "$inj" "$base" "injection and stacks"
ratio "$inj" "$nostacks" "stacks alone"
# The first round's summary lines. Not `| head`: under pipefail, grep killed by
# SIGPIPE when head has had its lines would fail the whole run.
grep -h -e "done:" -e "stacks:" "$work"/trace1/*.log || true
