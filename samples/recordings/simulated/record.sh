#!/usr/bin/env bash
# Records the samples on the simulated CUDA runtime (sim/; no GPU: kernels do not
# run, their times come from the simulation's cost model). Writes the raw
# recordings to samples/recordings/simulated/<sample>/ and the flamegraphs and
# timelines to flamegraphs/simulated/. The CPU stacks are taken in process (no
# root needed). Needs gcc, cargo, and NVIDIA's CUDA 13 wheels for nvcc and the
# headers (see sim/README.md).
#
# The PyTorch sample (samples/pytorch/gpt2_small.py, unchanged) runs through
# sim/run.sh in eager mode, compiled (torch.compile), and compiled with CUDA
# graphs (Inductor's TORCHINDUCTOR_CUDAGRAPHS=1), with the Python that has torch
# 2.11-2.14 for CUDA 13 (TORCH_PYTHON, else Debian's python3.11, else python3);
# without one it is skipped, and says so.
#
# usage: samples/recordings/simulated/record.sh [NAME...]   (all by default;
#        GPUPERF=path/to/gpuperf to pick the binary)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
gpuperf=${GPUPERF:-$repo/target/release/gpuperf}
if [ -z "${GPUPERF:-}" ]; then
    cargo build --release --locked --manifest-path "$repo/Cargo.toml" -p gpuperf
fi
nv=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

bash "$repo/sim/build.sh" "$work/sim"
for s in mock_llm transformer; do
    "$nv/bin/nvcc" -O2 -g -arch=sm_90 -cudart shared -L"$work/sim" -L"$nv/lib" \
        -Xcompiler -fno-omit-frame-pointer -Xlinker -rpath -Xlinker "$work/sim" \
        -o "$work/$s" "$repo/samples/$s/$s.cu"
done
# From its own directory: its .cargo/config.toml (frame pointers) applies only there.
(cd "$repo/samples/cudarc_graph" && cargo build --release --locked)
cp "$repo/samples/cudarc_graph/target/release/cudarc-graph-sample" "$work/cudarc_graph"

out=$repo/samples/recordings/simulated
flames=$repo/flamegraphs/simulated
mkdir -p "$out" "$flames"
only=" $* "
wanted() { [ "$only" = "  " ] || [[ "$only" == *" $1 "* ]]; }
record() {
    local name=$1
    shift
    wanted "$name" || return 0
    rm -rf "${out:?}/$name"
    # Recorded with relative paths, so that the files name no directory of this machine.
    (cd "$work" && LD_LIBRARY_PATH="$work/sim" "$gpuperf" record -q \
        --cupti "$work/sim/libcupti.so.13" --raw-dir "raw-$name" \
        -o "$name.svg" -c "$name.timeline.json" -- "./$name" "$@")
    mv "$work/raw-$name" "$out/$name"
    mv "$work/$name.svg" "$work/$name.timeline.json" "$flames/"
}
record mock_llm
record transformer --steps 32
record cudarc_graph 10

torch_python() {
    for py in ${TORCH_PYTHON:-} /usr/bin/python3.11 python3; do
        if "$py" -c 'import sys, torch; v = torch.__version__.split("."); sys.exit(not (v[0] == "2" and 11 <= int(v[1]) <= 14 and torch.version.cuda.startswith("13.")))' 2>/dev/null; then
            echo "$py"
            return
        fi
    done
}
record_torch() { # name [VAR=value...] -- gpt2_small.py's arguments
    local name=$1
    shift
    wanted "$name" || return 0
    local env=()
    while [ "$1" != "--" ]; do env+=("$1"); shift; done
    shift
    rm -rf "${out:?}/$name"
    (cd "$work" && env HOME="$work" TORCHINDUCTOR_CACHE_DIR="$work/inductor" TRITON_CACHE_DIR="$work/triton" \
        "${env[@]}" "$gpuperf" record -q --cupti "$work/sim/libcupti.so.13" --raw-dir "raw-$name" \
        -o "$name.svg" -- bash ./run.sh ./sim -- "$py" ./gpt2_small.py "$@")
    mv "$work/raw-$name" "$out/$name"
    # No timeline: PyTorch's deep stacks make it 15-90 MB; `gpuperf merge
    # samples/recordings/simulated/NAME -c NAME.timeline.json` writes one.
    mv "$work/$name.svg" "$flames/"
}
py=$(torch_python)
if [ -n "$py" ] && [ -f "$work/sim/libcublas.so.13" ]; then
    # Run by relative paths, so that the flamegraphs name no directory of this machine.
    cp "$repo/samples/pytorch/gpt2_small.py" "$repo/sim/run.sh" "$work/"
    steps=(--steps 3 --warmup 1)
    record_torch gpt2_small_eager -- --mode eager "${steps[@]}"
    record_torch gpt2_small_compile -- --mode compile "${steps[@]}"
    record_torch gpt2_small_cudagraphs TORCHINDUCTOR_CUDAGRAPHS=1 -- --mode compile "${steps[@]}"
else
    echo "record.sh: no Python with torch 2.11-2.14 for CUDA 13, or no cuBLAS stand-in: the PyTorch sample is not recorded" >&2
fi
for d in "$out"/*/; do  # each recording reads back
    "$gpuperf" report -q "$d" > /dev/null
done
echo "recorded: $(ls "$out" | grep -v '\.' | tr '\n' ' ')"
