#!/usr/bin/env bash
# Simulated CUDA (no GPU: kernels do not run) benchmark: the CPU time that the
# injection library adds to each launch of a small Hugging Face model's
# training loop (sim/bench/hf_train.py: GPT-2 from a config, bf16 autocast,
# AdamW), the real code path of a training step at its real depth, where
# sim/bench/stack_depth.sh runs a script of its shape. It runs, alternating,
# RUNS times each: no injection; the injection library with stacks off (what
# `gpuperf record --gpu-only` injects); with stacks on (what `gpuperf record`
# injects); and, with BASELINE_INJECT set to another build of the library (e.g.
# of main), that library with stacks on. Each run takes 3 untimed steps, then
# STEPS timed ones. It prints the medians of the process's CPU time per step
# (all its threads), what each variant adds per stack capture (a launch, a copy
# or a memset), and the captures per step and frames per capture, from the
# library's log of two runs of different lengths.
#
# The simulated driver's callback path has no unwind tables unless OUTDIR was
# built with GPUSIM_DISPATCH_UNWIND=1 (sim/build.sh): every stack then crosses
# it by a stack scan, which the driver on an H200 never needed; the first line
# says which.
#
# usage: bash sim/bench/hf_train.sh OUTDIR [RUNS [STEPS]]
#        (PYTHON=a CPython with torch 2.11-2.14 for CUDA 13 and transformers,
#        default python3; INJECT=the injection library, default
#        target/release/libgpuperf_inject.so; BASELINE_INJECT=a library to
#        compare it with)
set -euo pipefail
out=${1:?usage: bash sim/bench/hf_train.sh OUTDIR [RUNS [STEPS]]}
runs=${2:-5}
steps=${3:-20}
repo=$(cd "$(dirname "$0")/../.." && pwd)
inject=${INJECT:-$repo/target/release/libgpuperf_inject.so}
baseline=${BASELINE_INJECT:-}
python=${PYTHON:-python3}
script=$repo/sim/bench/hf_train.py
[ -f "$inject" ] || { echo "hf_train.sh: $inject missing (cargo build --release -p gpuperf-inject, or set INJECT)" >&2; exit 2; }
[ -z "$baseline" ] || [ -f "$baseline" ] || { echo "hf_train.sh: BASELINE_INJECT=$baseline is not a file" >&2; exit 2; }
"$python" -c 'import torch, transformers' 2> /dev/null || { echo "hf_train.sh: $python lacks torch or transformers (set PYTHON)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$repo/sim/bench/variant.sh"

# run VARIANT STEPS: one run; prints the CPU us per step. The library's log is
# left in $work/log.
run() {
    in_variant "$1" bash "$repo/sim/run.sh" "$out" -- "$python" "$script" 3 "$2" 2> /dev/null |
        sed -n 's/.* cpu_per_step_us \([0-9.]*\) .*/\1/p'
}
taken() { sed -n 's/.* stacks: \([0-9]*\) taken.*/\1/p' "$work/log" | head -1; }

# Captures per step: two runs of different lengths, the difference.
run stacks 0 > /dev/null
a=$(taken)
run stacks 10 > /dev/null
b=$(taken)
depth=$(sed -n 's/.* \([0-9.]*\) frames per capture.*/\1/p' "$work/log" | head -1)
per_step=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", (b - a) / 10 }')
[ "$per_step" != "0.0" ] || { echo "hf_train.sh: no stacks counted in the library's log" >&2; exit 1; }

variants="plain gpuonly stacks${baseline:+ baseline}"
echo "Hugging Face GPT-2 training steps on the simulated runtime (its driver callback path $(cat "$out/dispatch-unwind" 2> /dev/null || echo "of unknown build")), $steps timed steps per run, $runs runs of each variant alternating (medians of the process's CPU time; $("$python" -c 'import platform, torch, transformers; print("CPython", platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__)'); load average at start $(cut -d' ' -f1-3 /proc/loadavg))"
echo "  $per_step stack captures per step, $depth frames per capture"
for v in $variants; do : > "$work/$v"; done
for _ in $(seq "$runs"); do
    for v in $variants; do run "$v" "$steps" >> "$work/$v"; done
done
p=$(median < "$work/plain")
g=$(median < "$work/gpuonly")
line="  per step: plain $p us"
for v in $variants; do
    [ "$v" = plain ] && continue
    m=$(median < "$work/$v")
    line="$line, $v $m us (+$(awk -v a="$p" -v b="$m" -v n="$per_step" 'BEGIN { printf "%.0f", (b - a) * 1000 / n }') ns per capture"
    [ "$v" = gpuonly ] || line="$line, +$(awk -v a="$g" -v b="$m" -v n="$per_step" 'BEGIN { printf "%.0f", (b - a) * 1000 / n }') over gpuonly"
    line="$line)"
done
echo "$line"
echo "    runs: $(for v in $variants; do printf '%s [%s] ' "$v" "$(tr '\n' ' ' < "$work/$v" | sed 's/ $//')"; done)"
echo "  load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
