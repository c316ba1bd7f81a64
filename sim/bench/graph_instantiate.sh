#!/usr/bin/env bash
# Simulated CUDA (no GPU) benchmark: what the injection library adds to
# instantiating a graph (sim/bench/graph_instantiate.c: NODES kernel nodes,
# cudaGraphInstantiate + cudaGraphExecDestroy, N times), on the simulated
# runtime built in OUTDIR. Runs without injection, then each library given
# with GPUPERF_STACKS=0 and =1, alternating, RUNS rounds; prints the median
# time per instantiation and the median peak resident set of each.
#
# usage: bash sim/bench/graph_instantiate.sh OUTDIR LIB.so [BASELINE.so] [RUNS [NODES [N]]]
set -euo pipefail
out=${1:?usage: bash sim/bench/graph_instantiate.sh OUTDIR LIB.so [BASELINE.so] [RUNS [NODES [N]]]}
lib=${2:?missing LIB.so}
base=${3:-}
runs=${4:-7}
nodes=${5:-1000}
n=${6:-200}
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$out/libcudart.so.13" ] || bash "$repo/sim/build.sh" "$out" > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
inc=${CUDA_INCLUDE:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13/include}
gcc -O2 -I"$repo/sim/tests" -I"$inc" -o "$work/app" "$repo/sim/bench/graph_instantiate.c" \
    -L"$out" -Wl,-rpath,"$out" -lcudart
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
one() { # NAME [INJECT STACKS]
    local name=$1
    local env=(env -u CUDA_INJECTION64_PATH)
    if [ $# -gt 1 ]; then
        env=(env CUDA_INJECTION64_PATH="$2" GPUPERF_CUPTI_PATH="$out/libcupti.so.13"
            GPUPERF_GPU_TRACE="$work/trace/" GPUPERF_STACKS="$3")
    fi
    mkdir -p "$work/trace" && rm -f "$work/trace/"*
    "${env[@]}" "$work/app" "$nodes" "$n" |
        sed -n 's/.*ns_per_instantiation \([0-9.]*\) maxrss_kb \([0-9]*\).*/\1 \2/p' >> "$work/$name"
}
for r in $(seq "$runs"); do
    one none
    for s in 0 1; do
        one "lib_stacks$s" "$lib" "$s"
        [ -z "$base" ] || one "baseline_stacks$s" "$base" "$s"
    done
done
echo "$n instantiations of a $nodes-node graph, $runs rounds, medians ($(uptime | sed 's/.*load/load/')):"
for f in none lib_stacks0 lib_stacks1 baseline_stacks0 baseline_stacks1; do
    [ -f "$work/$f" ] || continue
    printf '  %-18s %10s ns/instantiation  peak RSS %s KiB\n' "$f" \
        "$(cut -d' ' -f1 "$work/$f" | median)" "$(cut -d' ' -f2 "$work/$f" | median)"
done
