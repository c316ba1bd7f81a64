#!/usr/bin/env bash
# Builds the CUDA C++ samples into samples/build/. Uses $NVCC, else nvcc on PATH,
# else the nvcc of NVIDIA's Python wheels (pip install nvidia-cuda-nvcc==13.0.*
# nvidia-nvvm==13.0.* nvidia-cuda-crt==13.0.* nvidia-cuda-cccl==13.0.*
# nvidia-cuda-runtime==13.0.*). Frame pointers are kept so CPU stacks reach main.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/build
mkdir -p "$out"
nvcc=${NVCC:-}
extra=()
if [ -z "$nvcc" ] && command -v nvcc >/dev/null 2>&1; then
    nvcc=nvcc
fi
if [ -z "$nvcc" ]; then
    nv=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13
    [ -x "$nv/bin/nvcc" ] || { echo "build.sh: no nvcc: set NVCC, put nvcc on PATH, or pip install the wheels named at the top of this script" >&2; exit 2; }
    nvcc=$nv/bin/nvcc
    extra=(-L"$nv/lib")
fi
arch=${CUDA_ARCH:-sm_90}
for src in mock_llm/mock_llm.cu transformer/transformer.cu; do
    name=$(basename "$src" .cu)
    "$nvcc" -O2 -g -arch="$arch" "${extra[@]}" -Xcompiler -fno-omit-frame-pointer \
        -o "$out/$name" "$here/$src"
    echo "built $out/$name"
done
