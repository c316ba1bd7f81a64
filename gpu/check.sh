#!/usr/bin/env bash
# gpuperf's one-shot check on a machine with a GPU: the environment, native
# capture (as root and rootless), PyTorch, overhead and driver events, judged
# item by item; writes OUT/summary.md, OUT/summary.json and OUT/check.tar.gz.
# With --sim the same check runs on the simulated CUDA runtime, built here
# (sim/build.sh): every item the simulation can show must hold, the rest say
# "needs a GPU". gpu/README.md says how to stage and run it on a GPU machine.
#
# usage: gpu/check.sh [--sim] [--strict] [--only GROUP[,GROUP]] [--budget SECONDS] OUT
#   groups: env, native, pytorch, overhead, driver (default: all)
# env:   GPUPERF               the gpuperf binary (default: gpu/stage/bin, else target/release, target/debug)
#        GPUPERF_TORCH_PYTHON  a Python with PyTorch (default: python3, else /usr/bin/python3.11)
#        NVCC                  nvcc (default: PATH, /usr/local/cuda/bin, NVIDIA's wheels)
#        GPUPERF_CHECK_INJECT  the injection library alone, for the overhead benchmark
#                              (default: gpu/stage/lib, else target/release, target/debug)
#        GPUPERF_CHECK_KEEP=1  keep the scratch directory
# Exit status: 0 when no item fell short, 1 when one did, 2 on a usage error.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=
for a in "$@"; do
    case $a in -*) ;; *) out=$a ;; esac
done
# gpu/stage.sh packs the stage to fit a GPU machine's transfer: unpack it here.
stage=$here/stage
if [ -f "$stage/stage.tar.gz" ]; then
    if ! tar -xzf "$stage/stage.tar.gz" -C "$stage"; then
        echo "check.sh: cannot unpack $stage/stage.tar.gz" >&2
        exit 2
    fi
    rm -f "$stage/stage.tar.gz"
fi
# The check keeps to its own budget (--budget); this limit only catches the
# check itself hanging, 60 s past the budget.
budget=420
prev=
for a in "$@"; do
    [ "$prev" = --budget ] && budget=$a
    prev=$a
done
timeout -k 10 $((budget + 60)) python3 "$here/check.py" "$@"
rc=$?
if [ "$rc" -gt 2 ] && [ -n "$out" ]; then
    mkdir -p "$out"
    echo "# gpuperf GPU check: the check itself ended with status $rc (killed at its time limit?); the items it finished are on its stderr" >"$out/summary.md"
fi
exit "$rc"
