#!/usr/bin/env bash
# Injection overhead on a launch-bound loop, on a machine with a GPU: N launches of
# an empty kernel (launch_loop.cu), timed without and with gpuperf's injection
# library, rounds alternating; prints the medians and their ratio (goal: <= 1.10).
#
# usage: launch-overhead.sh [LAUNCHES=200000] [ROUNDS=5]
# env:   LAUNCH_LOOP  a prebuilt launch_loop binary (else built with $NVCC, default nvcc)
#        INJECT       the library (default target/release/libgpuperf_inject.so)
set -euo pipefail
n=${1:-200000}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
inject=${INJECT:-$here/../../../target/release/libgpuperf_inject.so}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${LAUNCH_LOOP:-}
if [ -z "$bin" ]; then
    bin=$work/launch_loop
    "${NVCC:-nvcc}" -O2 -o "$bin" "$here/launch_loop.cu"
fi
[ -f "$inject" ] || { echo "launch-overhead: $inject not found; run cargo build --release -p gpuperf-inject" >&2; exit 2; }

seconds() { "$@" "$bin" "$n" | awk '{ print $4 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$work/base"
: >"$work/inj"
for ((r = 1; r <= rounds; r++)); do
    seconds env >>"$work/base"
    mkdir -p "$work/trace$r"
    seconds env CUDA_INJECTION64_PATH="$inject" GPUPERF_GPU_TRACE="$work/trace$r/" >>"$work/inj"
done
base=$(median <"$work/base")
inj=$(median <"$work/inj")
echo "launches per run: $n, rounds: $rounds"
echo "without injection: median $base s ($(paste -sd' ' "$work/base"))"
echo "with injection:    median $inj s ($(paste -sd' ' "$work/inj"))"
awk -v a="$inj" -v b="$base" -v n="$n" 'BEGIN { printf "ratio %.3f, %+.0f ns per launch\n", a / b, (a - b) * 1e9 / n }'
cat "$work"/trace*/*.log | grep -h "done:" | head -1
