#!/usr/bin/env bash
# Records the samples on the simulated CUDA runtime (sim/; no GPU: kernels do not
# run, their times come from the simulation's cost model). Writes the raw
# recordings to samples/recordings/simulated/<sample>/ and the flamegraphs and
# timelines to flamegraphs/simulated/. The CPU stacks are taken in process (no
# root needed). Needs gcc, cargo, and NVIDIA's CUDA 13 wheels for nvcc and the
# headers (see sim/README.md).
#
# usage: samples/recordings/simulated/record.sh     (GPUPERF=path/to/gpuperf to pick the binary)
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
record() {
    local name=$1
    shift
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
for d in "$out"/*/; do  # each recording reads back
    "$gpuperf" report -q "$d" > /dev/null
done
echo "recorded: $(ls "$out" | grep -v '\.' | tr '\n' ' ')"
