#!/usr/bin/env bash
# Idle time of one PyTorch profiler trace: `gpuperf report` against Holistic Trace
# Analysis's `get_idle_time_breakdown`, one run each, side by side (wall seconds,
# peak RSS), with the machine's load.
#
#   crates/gpuperf/benches/idle_vs_hta.sh TRACE [PYTHON]
#
# Needs `cargo build --release` and HTA in PYTHON (default python3):
# `pip install HolisticTraceAnalysis==0.5.0`. A large trace: the merge crate's
# kineto bench writes one (`cargo bench -p gpuperf-merge --features render
# --bench kineto -- --kernels 100000 --runs 1` prints where).
set -euo pipefail
trace=$1
python=${2:-python3}
root=$(cd "$(dirname "$0")/../../.." && pwd)
gpuperf=$root/target/release/gpuperf
hta=$root/crates/merge/tests/data/idle/hta_idle.py
[ -x "$gpuperf" ] || { echo "no $gpuperf: run cargo build --release" >&2; exit 1; }
echo "trace: $trace ($(du -h "$trace" | cut -f1))"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
run() {
    local what=$1
    shift
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f "$what: %e s wall, %U s user, %M KiB peak RSS" "$@" >/dev/null 2>"$log" ||
            { cat "$log" >&2; exit 1; }
        tail -1 "$log"
    else
        local t0=$SECONDS
        "$@" >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
        echo "$what: $((SECONDS - t0)) s wall"
    fi
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run "gpuperf report" "$gpuperf" report "$trace"
run "HTA get_idle_time_breakdown" "$python" "$hta" "$trace"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
