#!/usr/bin/env bash
# Simulated CUDA (no GPU: kernels do not run) benchmark: the CPU time that the
# injection library adds to each launch of a small Hugging Face model's
# training loop (sim/bench/hf_train.py: GPT-2 from a config, bf16 autocast,
# AdamW), the real code path of a training step at its real depth, where
# sim/bench/stack_depth.sh runs a script of its shape. Its variants: no
# injection (plain); the injection library with stacks off (gpuonly: what
# `gpuperf record --gpu-only` injects); with stacks on (stacks: what `gpuperf
# record` injects); and, with BASELINE_INJECT set to another build of the
# library (e.g. of main), that library with stacks on (baseline). Each run
# takes 3 untimed steps, then STEPS timed ones. It prints what each variant
# adds per stack capture (a launch, a copy or a memset) to the process's CPU
# time (all its threads), and the captures per step and frames per capture,
# from the library's log of two runs of different lengths. It prints too the
# throughput each variant loses against the other of its pair, in percent:
# steps per second of wall time, and per CPU-second. Where other processes
# share the CPUs, a run's wall time holds the time they took from it, which
# the two of a pair need not share alike; its CPU time does not, and a loop
# that keeps one CPU busy launching (as a decode loop does) loses, on a CPU of
# its own, the throughput per CPU-second.
#
# With LOOP=decode it runs a decode loop instead (sim/bench/hf_decode.py: the
# same GPT-2 in eval mode, greedy, one token at a time with its KV cache,
# batch 1), where a step is a token and STEPS counts tokens: a launch-bound
# loop, whose lost throughput is aimed at 3 % at most for stacks. Its
# pairs add stacks beside plain, so that what stacks cost in all is measured
# within a pair too, not only as the sum of two.
#
# Where the process may use two CPUs, the variants run in pairs, RUNS rounds:
# gpuonly beside plain, stacks beside gpuonly, stacks beside baseline, the two
# of a pair at once, one on each CPU (which one alternates from round to
# round), and each pair's difference is taken within its round. A shared
# machine's speed moves by tens of percent from minute to minute, which swamps
# what a capture costs (a few percent of a step) in runs made one after
# another; two runs made at once see the same minute. Where it may not (or
# with PAIRED=0), the variants run one after another, alternating, and the
# medians of each are compared. Every run has OMP_NUM_THREADS=1: the simulated
# GPU runs no kernels, and OpenMP's idle workers spinning on another CPU would
# otherwise add CPU time that moves with the machine's load.
#
# The simulated driver's callback path has no unwind tables unless OUTDIR was
# built with GPUSIM_DISPATCH_UNWIND=1 (sim/build.sh): every stack then crosses
# it by a stack scan, which the driver on an H200 never needed; the first line
# says which.
#
# With IR=1 it then counts instructions, which unlike CPU time do not move with
# the load of a shared machine (valgrind's callgrind, on PATH): for each variant,
# two runs of IR_STEPS and 3 x IR_STEPS timed steps (run side by side), their
# difference in the process's instructions over the stack captures between
# (from the library's log; plain and gpuonly take the stacks variant's, so that
# each figure less plain's is what the variant adds per capture); and for
# stacks and baseline, the same difference of the inclusive instructions of the
# capture (Stacks::capture_into) and of its native walk, Python splice and
# Stacks::identify (callgrind_annotate; "-" where the build has no such
# function).
#
# With PERF=1 it then samples the stacks (and baseline) variant's CPU time
# with perf (perf record -e cpu-clock, on PATH): PERF_RUNS runs of each,
# alternating, of PERF_STEPS timed steps; for each run, the CPU time of the
# capture itself per capture: the samples in the library's capture path (the
# unwinder's functions and the injection library's stack functions, the
# library's symbols), at 5 kHz, over the run's captures. The share of the
# process's samples the capture takes moves less with a shared machine's load
# than the difference of two runs' CPU times. It leaves out what the capture
# calls in libc (on its usual path, dl_iterate_phdr for the loader's counters:
# about 10 ns a call with its lines in cache) and what the captures cost the
# rest of the program (cache lines evicted), which only the difference shows:
# so PERF=1 also runs PERF_RUNS pairs of gpuonly and stacks at once (as above)
# under perf, and splits what stacks add to the timed steps by the object whose
# code the samples fell in: the library's own code, and the program's code
# slowed down (by the cache lines the captures evict).
#
# usage: bash sim/bench/hf_train.sh OUTDIR [RUNS [STEPS]]  (RUNS=0: IR=1 or PERF=1 only)
#        (LOOP=train, default, or decode: STEPS are then tokens, default
#        3000; PYTHON=a CPython with torch 2.11-2.14 for CUDA 13 and
#        transformers, default python3; INJECT=the injection library, default
#        target/release/libgpuperf_inject.so; BASELINE_INJECT=a library to
#        compare it with; IR=1, IR_STEPS=10; IR_VARIANTS="stacks ..." to count
#        only some variants; PERF=1, PERF_RUNS=3, PERF_STEPS=1000;
#        PAIRED=0 for runs one after another; PAIRS="X:Y ..." to run only
#        those pairs, of plain, gpuonly, stacks, baseline and basegpuonly:
#        BASELINE_INJECT with stacks off, to compare two builds' --gpu-only)
set -euo pipefail
out=${1:?usage: bash sim/bench/hf_train.sh OUTDIR [RUNS [STEPS]]}
runs=${2:-5}
loop=${LOOP:-train}
case $loop in
    train) steps=${3:-200} ;;
    decode) steps=${3:-3000} ;;
    *) echo "hf_train.sh: LOOP=$loop is neither train nor decode" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
inject=${INJECT:-$repo/target/release/libgpuperf_inject.so}
baseline=${BASELINE_INJECT:-}
python=${PYTHON:-python3}
# One hash seed for every run: string hashing, and with it the interpreter's
# work per step, otherwise differs from run to run.
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
script=$repo/sim/bench/hf_$loop.py
# What a step is, in the output.
unit=step
what="training steps"
[ "$loop" = train ] || { unit=token; what="decode tokens (greedy, KV cache, batch 1)"; }
[ -f "$inject" ] || { echo "hf_train.sh: $inject missing (cargo build --release -p gpuperf-inject, or set INJECT)" >&2; exit 2; }
[ -z "$baseline" ] || [ -f "$baseline" ] || { echo "hf_train.sh: BASELINE_INJECT=$baseline is not a file" >&2; exit 2; }
# See above: the same in every variant.
export OMP_NUM_THREADS=1
"$python" -c 'import torch, transformers' 2> /dev/null || { echo "hf_train.sh: $python lacks torch or transformers (set PYTHON)" >&2; exit 2; }
ir=${IR:-0}
ir_steps=${IR_STEPS:-10}
sample=${PERF:-0}
sample_runs=${PERF_RUNS:-3}
sample_steps=${PERF_STEPS:-1000}
[ "$sample" != 1 ] || command -v perf > /dev/null || { echo "hf_train.sh: PERF=1 needs perf on PATH" >&2; exit 2; }
if [ "$ir" = 1 ]; then
    for t in valgrind callgrind_annotate; do
        command -v "$t" > /dev/null || { echo "hf_train.sh: IR=1 needs $t (valgrind, for callgrind) on PATH" >&2; exit 2; }
    done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$repo/sim/bench/variant.sh"
# The decode loop's budget is for stacks against no injection: measured within
# a pair of its own as well (see above).
[ "$loop" = train ] || pairs="$pairs plain:stacks"
pairs=${PAIRS:-$pairs}

# run VARIANT STEPS [PERF_DATA]: one run; prints "CPU WALL FAULTS", its CPU and
# wall us per step and minor page faults per step; with PERF_DATA, under perf (samples stamped with
# CLOCK_MONOTONIC), then the timed steps' window ("START END", seconds). The
# library's log is left in $work/log, the run's stderr in $work/stderr.
run() {
    in_variant "$1" bash "$repo/sim/run.sh" "$out" -- \
        ${3:+perf record -q -e cpu-clock -F 2000 -k CLOCK_MONOTONIC -o "$3"} \
        "$python" "$script" 3 "$2" 2> "$work/stderr" |
        sed -n -e 's/.* cpu_per_step_us \([0-9.]*\) wall_per_step_us \([0-9.]*\) faults_per_step \([0-9.]*\).*/\1 \2 \3/p' -e "${3:+s/^timed_window //p}"
}
taken() { sed -n 's/.* stacks: \([0-9]*\) taken.*/\1/p' "$work/log" | head -1; }

# pair X Y ROUND STEPS [PERF_DIR]: a run of X and one of Y at once (see
# at_once); writes "X_CPU X_WALL X_FAULTS Y_CPU Y_WALL Y_FAULTS", each one's CPU
# and wall us and minor page faults per step, to $work/pair.
# With PERF_DIR, under perf (PERF_DIR/X.data and Y.data), and then each one's
# timed window on a line.
pair() {
    local lines=1
    [ -z "${5:-}" ] || lines=2
    at_once "$3" "$work/pair.x" "$work/pair.y" -- run "$1" "$4" ${5:+"$5/$1.data"} -- run "$2" "$4" ${5:+"$5/$2.data"}
    [ "$(wc -l < "$work/pair.x")" = "$lines" ] && [ "$(wc -l < "$work/pair.y")" = "$lines" ] || {
        echo "hf_train.sh: a paired run of $1 and $2 printed no times" >&2
        exit 1
    }
    {
        head -1 "$work/pair.x" | tr '\n' ' '
        head -1 "$work/pair.y"
        [ "$lines" = 1 ] || { sed -n 2p "$work/pair.x" && sed -n 2p "$work/pair.y"; }
    } > "$work/pair"
}

# The functions whose inclusive instructions IR=1 gives per capture, and their
# names in its output.
ir_fns="gpuperf_inject::stacks::Stacks::capture_into=capture_into
gpuperf_unwind::walk::walk=walk
gpuperf_unwind::python::splice::<impl gpuperf_unwind::python::Python>::splice=splice
gpuperf_inject::stacks::Stacks::identify=identify"

# ir_run VARIANT STEPS DIR: one run under callgrind; DIR keeps its library log,
# callgrind's file (cg.out) and stderr. Own DIR, so that two can run at once.
ir_run() {
    local work=$3 exe
    mkdir -p "$work"
    # The interpreter itself, not a launcher script (pyenv's shims are).
    exe=$("$python" -c 'import sys; print(sys.executable)')
    in_variant "$1" bash "$repo/sim/run.sh" "$out" -- valgrind --tool=callgrind --trace-children=no \
        --callgrind-out-file="$work/cg.out" "$exe" "$script" 3 "$2" > /dev/null 2> "$work/stderr"
}

# ir_counts DIR: "total N", "captures N" (absent without the library's log)
# and "NAME N" for each of ir_fns found: the inclusive instructions of the
# function's own entry (the one callgrind_annotate names with its object; its
# other entries are the parts of it inlined from other files), summed over its
# copies (the name, or the name and generic arguments).
ir_counts() {
    echo "total $(sed -n 's/.*I *refs: *//p' "$1/stderr" | tr -d ,)"
    [ ! -f "$1/log" ] || echo "captures $(sed -n 's/.* stacks: \([0-9]*\) taken.*/\1/p' "$1/log" | head -1)"
    # Run in DIR: callgrind_annotate strips the working directory from the
    # names of the functions' own files, not from those of called ones, and
    # then splits a function's inclusive cost between two entries.
    (cd "$1" && callgrind_annotate --inclusive=yes --threshold=100 --auto=no --show-percs=no cg.out) |
        awk -v fns="$ir_fns" '
            BEGIN { n = split(fns, f, "\n"); for (i = 1; i <= n; i++) { eq = index(f[i], "="); full[i] = substr(f[i], 1, eq - 1); short[i] = substr(f[i], eq + 1) } }
            / \[[^]]*\]$/ && match($0, /^ *[0-9,]+ +/) {
                c = substr($0, 1, RLENGTH); gsub(/[ ,]/, "", c)
                name = substr($0, RLENGTH + 1); sub(/ \[[^]]*\]$/, "", name); name = substr(name, index(name, ":") + 1)
                for (i = 1; i <= n; i++)
                    if (name == full[i] || index(name, full[i] "<") == 1 || index(name, full[i] "::<") == 1) sum[short[i]] += c
            }
            END { for (k in sum) print k, sum[k] }'
}

# ir_variant VARIANT: both runs of a variant under callgrind, side by side; the
# counts of each in $work/ir.VARIANT.a and .b.
ir_variant() {
    local d=$work/ir.$1 pa pb ra=0 rb=0
    rm -rf "$d"
    ir_run "$1" "$ir_steps" "$d/a" &
    pa=$!
    ir_run "$1" $((3 * ir_steps)) "$d/b" &
    pb=$!
    wait "$pa" || ra=$?
    wait "$pb" || rb=$?
    [ "$ra" = 0 ] && [ "$rb" = 0 ] || {
        echo "hf_train.sh: a callgrind run of $1 failed:" >&2
        tail -n 20 "$d"/a/stderr "$d"/b/stderr >&2
        exit 1
    }
    ir_counts "$d/a" > "$d.a"
    ir_counts "$d/b" > "$d.b"
    rm -rf "$d"
}
# ir_get VARIANT a|b KEY: a count of ir_variant's, empty where absent.
ir_get() { awk -v k="$3" '$1 == k { print $2 }' "$work/ir.$1.$2"; }
# per_capture A B CA CB: (B - A) / (CB - CA), or "-" where a count is missing.
per_capture() { awk -v a="$1" -v b="$2" -v ca="$3" -v cb="$4" 'BEGIN { if (a == "" || b == "" || cb - ca <= 0) print "-"; else printf "%.0f\n", (b - a) / (cb - ca) }'; }

# Captures per $unit: two runs of different lengths, the difference.
run stacks 0 > /dev/null
a=$(taken)
run stacks 10 > /dev/null
b=$(taken)
depth=$(sed -n 's/.* \([0-9.]*\) frames per capture.*/\1/p' "$work/log" | head -1)
# Captures that were the whole capture kept for the stack expected (libraries
# that count them), of the 10-step run.
whole=$(sed -n 's/.* \([0-9]*\) of them the whole capture.*/\1/p' "$work/log" | head -1)
whole=${whole:+, $(awk -v w="$whole" -v t="$b" 'BEGIN { printf "%.1f", 100 * w / t }') % of the captures of a 13-$unit run taken whole from those kept (proven, not walked)}
per_step=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", (b - a) / 10 }')
[ "$per_step" != "0.0" ] || { echo "hf_train.sh: no stacks counted in the library's log" >&2; exit 1; }

variants="plain gpuonly stacks${baseline:+ baseline}"
if [ -n "${PAIRS:-}" ]; then
    # Those in the pairs asked for, in the usual order.
    variants=$(for v in $variants ${baseline:+basegpuonly}; do case " $pairs " in *" $v:"* | *":$v "*) echo "$v" ;; esac; done | xargs)
fi
# per_cap A B: (B - A) us per step, in ns per capture.
per_cap() { awk -v a="$1" -v b="$2" -v n="$per_step" 'BEGIN { printf "%+.0f\n", (b - a) * 1000 / n }'; }
# lost A B: the throughput lost, in percent, by a run taking B us per step
# against one taking A: 100 * (1 - A / B).
lost() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f\n", 100 * (1 - a / b) }'; }
if [ "$paired" = 1 ]; then
    timing="$steps timed ${unit}s per run, $runs rounds of pairs run at once on CPUs ${cpus[0]} and ${cpus[1]}, swapping them from round to round (differences of the process's CPU time within each pair)"
else
    timing="$steps timed ${unit}s per run, $runs runs of each variant alternating, one after another (medians of the process's CPU time)"
fi
[ "$runs" -gt 0 ] || timing="no CPU time runs"
echo "Hugging Face GPT-2 $what on the simulated runtime (its driver callback path $(cat "$out/dispatch-unwind" 2> /dev/null || echo "of unknown build")), $timing ($("$python" -c 'import platform, torch, transformers; print("CPython", platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__)'); load average at start $(cut -d' ' -f1-3 /proc/loadavg))"
echo "  $per_step stack captures per $unit, $depth frames per capture$whole"
if [ "$runs" -gt 0 ] && [ "$paired" = 1 ]; then
    for v in $variants; do : > "$work/$v"; : > "$work/$v.wall"; : > "$work/$v.faults"; done
    for p in $pairs; do : > "$work/diff.$p"; : > "$work/lost.$p"; : > "$work/lostcpu.$p"; done
    for r in $(seq "$runs"); do
        for p in $pairs; do
            pair "${p%:*}" "${p#*:}" "$r" "$steps"
            read -r tx wx fx ty wy fy < "$work/pair"
            echo "$fx" >> "$work/${p%:*}.faults"
            echo "$fy" >> "$work/${p#*:}.faults"
            echo "$tx" >> "$work/${p%:*}"
            echo "$ty" >> "$work/${p#*:}"
            echo "$wx" >> "$work/${p%:*}.wall"
            echo "$wy" >> "$work/${p#*:}.wall"
            per_cap "$tx" "$ty" >> "$work/diff.$p"
            lost "$wx" "$wy" >> "$work/lost.$p"
            lost "$tx" "$ty" >> "$work/lostcpu.$p"
        done
    done
    line="  per $unit (medians of every run of each): "
    for v in $variants; do line="$line$v $(median < "$work/$v") us CPU, $(median < "$work/$v.wall") us wall; "; done
    echo "${line%; }"
    for p in $pairs; do
        echo "  ${p#*:} over ${p%:*}: $(balanced "$work/diff.$p" %+.0f) ns per capture (median of the means of two rounds, the CPUs swapped; of single rounds $(signed_median < "$work/diff.$p"); rounds: $(rounds "$work/diff.$p"))"
    done
    echo "  throughput lost (${unit}s per second of wall time, and per CPU-second; medians of the means of two rounds, the CPUs swapped, every round's in brackets):"
    for p in $pairs; do
        echo "    ${p#*:} against ${p%:*}: $(balanced "$work/lost.$p" %+.2f) % of wall [$(rounds "$work/lost.$p")], $(balanced "$work/lostcpu.$p" %+.2f) % per CPU-second [$(rounds "$work/lostcpu.$p")]"
    done
    echo "    runs (CPU us per $unit): $(for v in $variants; do printf '%s [%s] ' "$v" "$(rounds "$work/$v")"; done)"
    echo "    runs (wall us per $unit): $(for v in $variants; do printf '%s [%s] ' "$v" "$(rounds "$work/$v.wall")"; done)"
    echo "  minor page faults per capture (medians of every run of each; the memory the process touched afresh): $(for v in $variants; do printf '%s %s; ' "$v" "$(median < "$work/$v.faults" | awk -v n="$per_step" '{ printf "%.3f", $1 / n }')"; done | sed 's/; $//')"
    echo "  load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
elif [ "$runs" -gt 0 ]; then
    for v in $variants; do : > "$work/$v"; : > "$work/$v.wall"; done
    for _ in $(seq "$runs"); do
        for v in $variants; do
            run "$v" "$steps" > "$work/one"
            read -r c w _ < "$work/one"
            echo "$c" >> "$work/$v"
            echo "$w" >> "$work/$v.wall"
        done
    done
    p=$(median < "$work/plain")
    g=$(median < "$work/gpuonly")
    pw=$(median < "$work/plain.wall")
    gw=$(median < "$work/gpuonly.wall")
    cost="  per $unit: plain $p us"
    lost="  throughput lost (${unit}s per second of wall time, and per CPU-second; of the medians):"
    for v in $variants; do
        [ "$v" = plain ] && continue
        m=$(median < "$work/$v")
        mw=$(median < "$work/$v.wall")
        cost="$cost, $v $m us ($(per_cap "$p" "$m") ns per capture"
        lost="$lost $v against plain $(lost "$pw" "$mw") % of wall, $(lost "$p" "$m") % per CPU-second"
        if [ "$v" = gpuonly ]; then
            cost="$cost)"
            lost="$lost;"
        else
            cost="$cost, $(per_cap "$g" "$m") over gpuonly)"
            lost="$lost (against gpuonly $(lost "$gw" "$mw") %, $(lost "$g" "$m") %);"
        fi
    done
    echo "$cost"
    echo "${lost%;}"
    echo "    runs (CPU us per $unit): $(for v in $variants; do printf '%s [%s] ' "$v" "$(rounds "$work/$v")"; done)"
    echo "    runs (wall us per $unit): $(for v in $variants; do printf '%s [%s] ' "$v" "$(rounds "$work/$v.wall")"; done)"
    echo "  minor page faults per capture (medians of every run of each; the memory the process touched afresh): $(for v in $variants; do printf '%s %s; ' "$v" "$(median < "$work/$v.faults" | awk -v n="$per_step" '{ printf "%.3f", $1 / n }')"; done | sed 's/; $//')"
    echo "  load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
fi

# sample_run VARIANT: one run under perf; prints the capture path's CPU ns
# per capture, its samples and the run's captures.
sample_run() {
    local d=$work/perf
    rm -rf "$d"
    mkdir -p "$d"
    in_variant "$1" bash "$repo/sim/run.sh" "$out" -- perf record -q -e cpu-clock -F 5000 -o "$d/perf.data" \
        "$python" "$script" 3 "$sample_steps" > /dev/null 2> "$d/stderr" || {
        echo "hf_train.sh: a perf run of $1 failed:" >&2
        tail -n 20 "$d/stderr" >&2
        exit 1
    }
    perf report -i "$d/perf.data" -g none --no-children --sort dso,sym -F sample,dso,sym --stdio 2> /dev/null |
        awk -v caps="$(taken)" -v lib="$(basename "$(variant_lib "$1")")" '
            # samples, library, [.], symbol
            $2 == lib && ($4 ~ /^gpuperf_unwind/ || $4 ~ /^gpuperf_inject::stacks::/) { s += $1 }
            END { if (caps > 0) printf "%.0f %d %d\n", s * 200000 / caps, s, caps }'
}
if [ "$sample" = 1 ]; then
    sample_list="stacks${baseline:+ baseline}"
    for v in $sample_list; do : > "$work/perf.$v"; done
    for _ in $(seq "$sample_runs"); do
        for v in $sample_list; do sample_run "$v" >> "$work/perf.$v"; done
    done
    echo "  CPU time of the capture itself (perf's cpu-clock samples at 5 kHz in the library's capture path, over the captures; $sample_runs runs of each variant alternating, $sample_steps timed steps each):"
    for v in $sample_list; do
        echo "    $v: median $(cut -d' ' -f1 "$work/perf.$v" | median) ns per capture (runs: $(awk '{ printf "%s%s ns (%s samples, %s captures)", (NR > 1 ? ", " : ""), $1, $2, $3 }' "$work/perf.$v"))"
    done
fi

# by_object PERF_DATA "START END": "OBJECT SAMPLES" for each object the
# samples within START to END (seconds, as the timestamps) fell in.
by_object() {
    perf report -i "$1" --time "${2/ /,}" -g none --no-children --sort dso -F sample,dso --stdio 2> /dev/null |
        awk 'NF == 2 && $1 ~ /^[0-9]+$/ { print $2, $1 }'
}
if [ "$sample" = 1 ] && [ "$paired" = 1 ]; then
    d=$work/objects
    mkdir -p "$d"
    : > "$d/gpuonly"
    : > "$d/stacks"
    : > "$d/cpu"
    for r in $(seq "$sample_runs"); do
        pair gpuonly stacks "$r" "$sample_steps" "$d"
        { read -r tx _ _ ty _ _ && read -r wx && read -r wy; } < "$work/pair"
        by_object "$d/gpuonly.data" "$wx" >> "$d/gpuonly"
        by_object "$d/stacks.data" "$wy" >> "$d/stacks"
        per_cap "$tx" "$ty" >> "$d/cpu"
    done
    # A sample at 2 kHz is 500 us of CPU time.
    echo "  what stacks add to the timed steps, by the object the CPU time was spent in (perf's cpu-clock samples at 2 kHz; $sample_runs rounds of gpuonly and stacks at once, $sample_steps timed steps each; ns per capture, all rounds' samples over all their captures):"
    awk -v lib="$(basename "$inject")" -v caps="$(awk -v n="$per_step" -v s="$sample_steps" -v r="$sample_runs" 'BEGIN { print n * s * r }')" '
        FNR == 1 { f++ }
        { n[$1, f] += $2; o[$1] = 1 }
        END {
            for (k in o) { d = (n[k, 2] - n[k, 1]) * 500000 / caps; all += d; if (k == lib) own = d; else if (d >= 50 || d <= -50) big[k] = d; else rest += d }
            line = sprintf("    the library %+.0f; other objects:", own)
            while (1) { m = ""; for (k in big) if (m == "" || big[k] > big[m]) m = k; if (m == "") break; line = line sprintf(" %s %+.0f,", m, big[m]); slow += big[m]; delete big[m] }
            printf "%s the rest %+.0f (other objects %+.0f in all); in all %+.0f\n", line, rest, slow + rest, all
        }' "$d/gpuonly" "$d/stacks"
    echo "    the same runs' CPU time: median $(signed_median < "$d/cpu") ns per capture (rounds: $(rounds "$d/cpu"))"
elif [ "$sample" = 1 ]; then
    echo "  (no split of what stacks add by object: it runs gpuonly and stacks at once, on two CPUs, and this process may use one, or PAIRED=0)"
fi

[ "$ir" = 1 ] || exit 0
# Plain and gpuonly are divided by the stacks variant's captures: it runs too.
irv=" ${IR_VARIANTS:-$variants} "
case $irv in *" plain "* | *" gpuonly "*) irv="$irv stacks " ;; esac
ir_list=
for v in $variants; do
    case $irv in *" $v "*) ir_list="$ir_list $v" ;; esac
done
[ -n "$ir_list" ] || { echo "hf_train.sh: IR_VARIANTS=${IR_VARIANTS:-} names none of: $variants" >&2; exit 2; }
for v in $ir_list; do ir_variant "$v"; done
echo "  instructions per stack capture (callgrind, whole process; per variant, two runs side by side of $ir_steps and $((3 * ir_steps)) timed steps after 3 untimed: the difference over the captures between, the stacks variant's for plain and gpuonly):"
line="   "
for v in $ir_list; do
    c=$v
    [ "$v" = plain ] || [ "$v" = gpuonly ] && c=stacks
    ca=$(ir_get "$c" a captures)
    cb=$(ir_get "$c" b captures)
    i=$(per_capture "$(ir_get "$v" a total)" "$(ir_get "$v" b total)" "$ca" "$cb")
    line="$line $v $i"
    [ "$v" = plain ] && base=$i
    [ "$v" != plain ] && [ -n "${base:-}" ] && [ "$i" != - ] && [ "$base" != - ] && line="$line (+$((i - base)))"
    [ "$v" = plain ] || [ "$v" = gpuonly ] || line="$line [$ca -> $cb captures]"
    line="$line,"
done
echo "${line%,}"
for v in $ir_list; do
    [ "$v" = plain ] || [ "$v" = gpuonly ] && continue
    line="    $v, inclusive per capture:"
    for f in capture_into walk splice identify; do
        line="$line $f $(per_capture "$(ir_get "$v" a "$f")" "$(ir_get "$v" b "$f")" "$(ir_get "$v" a captures)" "$(ir_get "$v" b captures)")"
    done
    echo "$line"
done
