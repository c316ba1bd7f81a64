#!/bin/sh
# `gpuperf record --driver` on the simulated drivers, in the kernel VM: `drive`
# (making ioctls, submitting DRM scheduler jobs, raising interrupts and one
# Xid) and sim_app (the simulated CUDA runtime, launching and syncing) are
# started together by one shell, so their events interleave as far as the
# guest's speed lets them. `drive` submits a hundred jobs (ten of them waiting
# on a dependency) to the simulated DRM scheduler. Writes the timeline
# (OUT.json), its picture (OUT.svg) and one of sim_app's CUDA calls alone
# (OUT-zoom.svg). Everything in it is SIMULATED: the modules of this directory,
# no GPU.
#
# usage: sim/kernel/driver-demo.sh KERNEL OUT      (after sim/kernel/ci.sh; needs
#        the CUDA 13 wheels that sim/build.sh names)
# gpuperf: $GPUPERF, else `gpuperf` on PATH, else built here with cargo.
set -eu
kver=${1:?usage: driver-demo.sh KERNEL OUT}
out=${2:?usage: driver-demo.sh KERNEL OUT}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$repo/target/driver-demo
mkdir -p "$work"
cuda=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13
CUDA_INCLUDE=$cuda/include bash "$repo/sim/build.sh" "$work/sim" >/dev/null
"$cuda/bin/nvcc" -O2 -g -arch=sm_90 -cudart shared -L"$work/sim" -L"$cuda/lib" \
    -Xcompiler -fno-omit-frame-pointer -Xlinker -rpath -Xlinker "$work/sim" \
    -o "$work/sim_app" "$repo/sim/tests/sim_app.cu"
gcc -O2 -pthread -o "$work/drive" "$here/drive.c"
gpuperf=${GPUPERF:-$(command -v gpuperf || true)}
if [ -z "$gpuperf" ]; then
    gpuperf=$(cd "$repo" && cargo build -q -p gpuperf --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*\/gpuperf\)".*/\1/p' | tail -n 1)
fi
[ -x "$gpuperf" ] || { echo "driver-demo.sh: no gpuperf binary (set GPUPERF)" >&2; exit 1; }
cat > "$work/guest.sh" <<SH
set -e
modprobe nvidia_sim
modprobe drm_sched_sim
cd /tmp
$gpuperf record --driver -q -c demo.json --cupti $work/sim/libcupti.so.13 -- \
    sh -c '$work/drive --ioctls 4 --jobs 100 --run-us 300 --deps 10 --dep-us 800 --irqs 2 --xids 1 >/dev/null & $work/sim_app sync-loop 12 >/dev/null; wait'
echo GPUPERF-DEMO-JSON
cat demo.json
SH
"$here/run.sh" -k "$kver" -- sh "$work/guest.sh" > "$work/guest.out"
sed -n '/^GPUPERF-DEMO-JSON/,$p' "$work/guest.out" | tail -n +2 | tr -d '\r' > "$out.json"
title="gpuperf record --driver on SIMULATED drivers (nvidia_sim, drm_sched_sim; kernel VM, no GPU)"
python3 "$here/timeline_svg.py" "$out.json" "$out.svg" "$title"
python3 "$here/timeline_svg.py" "$out.json" "$out-zoom.svg" "$title: sim_app's CUDA calls" sim_app
echo "wrote $out.json, $out.svg and $out-zoom.svg"
