#!/usr/bin/env bash
# Simulated CUDA (no GPU: kernels do not run): runs COMMAND on the simulated
# runtime built in OUTDIR, building it there first if it is not.
#
# usage: bash sim/run.sh OUTDIR -- COMMAND [ARGS...]
#
# What it sets for COMMAND and its children:
# - LD_PRELOAD: the stand-ins (libcuda.so.1, libcudart.so.13, libcupti.so.13,
#   libcublas.so.13, libcublasLt.so.13, libnvidia-ml.so.1). PyTorch's libraries
#   find NVIDIA's copies through DT_RPATH, which LD_LIBRARY_PATH cannot
#   override; preloaded libraries with the same sonames are used instead.
# - LD_LIBRARY_PATH: OUTDIR first, for programs that link the sonames plainly.
# - TRITON_LIBCUDA_PATH: OUTDIR, where Triton's launcher finds libcuda.so.1.
# - PYTHONPATH: OUTDIR/python first, whose sitecustomize.py (sim/python/) turns cuDNN off in
#   PyTorch as soon as `torch` is imported (torch.backends.cudnn.enabled and
#   cuDNN attention): cuDNN, like cuFFT, cuSOLVER and NCCL, carries its own CUDA
#   runtime that cannot start on a simulated driver, and PyTorch then takes its
#   native kernels. Any other sitecustomize on the path still runs.
set -euo pipefail
out=${1:?usage: bash sim/run.sh OUTDIR -- COMMAND [ARGS...]}
shift
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: bash sim/run.sh OUTDIR -- COMMAND [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$out/libcudart.so.13" ] || [ ! -f "$out/libcublas.so.13" ] || [ ! -f "$out/python/sitecustomize.py" ]; then
    bash "$here/build.sh" "$out" >&2
fi
out=$(cd "$out" && pwd)
[ -f "$out/libcublas.so.13" ] || { echo "sim/run.sh: $out/libcublas.so.13 missing (see sim/build.sh)" >&2; exit 2; }

[ -f "$out/python/sitecustomize.py" ] || { echo "sim/run.sh: $out/python/sitecustomize.py missing (see sim/build.sh)" >&2; exit 2; }

preload=""
for lib in libcuda.so.1 libcudart.so.13 libcupti.so.13 libcublas.so.13 libcublasLt.so.13 libnvidia-ml.so.1; do
    preload="$preload${preload:+:}$out/$lib"
done
export LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}"
export LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRITON_LIBCUDA_PATH="$out"
export PYTHONPATH="$out/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$@"
