"""Per-stream idle time of a Kineto trace by Holistic Trace Analysis (HTA).

Usage: python3 hta_idle.py TRACE [--exact] [--all-steps]

Prints one JSON object:

    {"rank": R, "steps": S,
     "streams": {"<stream>": {"host_wait": ns, "kernel_wait": ns, "other": ns}},
     "gaps": {"<stream>": [[start_ns, gap_ns, "category"], ...]}}

By default HTA runs with its defaults, as a user calls it: timestamps rounded
to the µs, and, where the trace has two or more `ProfilerStep#N`, only GPU
work launched before the last step began. `--exact` disables the rounding
(`HTA_DISABLE_NS_ROUNDING=1`); `--all-steps` counts the last step too
(`include_last_profiler_step=True`). HTA's times are µs; they are printed in ns.

The totals are HTA's `get_idle_time_breakdown`. The gaps are HTA's own
per-kernel rows behind those totals (each work item's `idle_interval` and
`idle_category`, and its start in the trace's clock), read from the analysis'
frame as it returns: HTA's API gives only the sums.
"""

import json
from decimal import Decimal
import os
import shutil
import sys
import tempfile


def main() -> None:
    trace = os.path.abspath(sys.argv[1])
    flags = sys.argv[2:]
    if "--exact" in flags:
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.trace_analysis import TraceAnalysis

    frames = []
    target = BreakdownAnalysis._analyze_idle_time_for_stream.__func__.__code__

    def profile(frame, event, _arg):
        if event == "return" and frame.f_code is target:
            frames.append(frame.f_locals["gpu_kernels_s"].copy())

    # HTA reads a directory of traces, one per rank.
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(trace, os.path.join(d, os.path.basename(trace)))
        analysis = TraceAnalysis(
            trace_dir=d, include_last_profiler_step="--all-steps" in flags
        )
        rank = analysis.t.get_ranks()[0]
        sys.setprofile(profile)
        try:
            df, _ = analysis.get_idle_time_breakdown(
                ranks=[rank], visualize=False, show_idle_interval_stats=False
            )
        finally:
            sys.setprofile(None)
    from hta.utils.utils import IdleTimeType

    names = {m.value: n.lower() for n, m in IdleTimeType.__members__.items()}
    streams: dict = {}
    for row in df.itertuples():
        per = streams.setdefault(str(int(row.stream)), {})
        per[str(row.idle_category)] = round(float(row.idle_time) * 1000)
    gaps: dict = {}
    # In decimal: a timestamp in ns since the epoch does not fit a double.
    base = Decimal(str(analysis.t.min_ts))
    for f in frames:
        for row in f.itertuples():
            if row.idle_interval != row.idle_interval:  # NaN: the first item
                continue
            gaps.setdefault(str(int(row.stream)), []).append(
                [
                    int(((Decimal(str(row.ts)) + base) * 1000).to_integral_value()),
                    round(float(row.idle_interval) * 1000),
                    names[row.idle_category],
                ]
            )
    steps = [
        s for s in analysis.t.symbol_table.get_sym_table() if "ProfilerStep" in s
    ]
    print(
        json.dumps(
            {"rank": int(rank), "steps": len(steps), "streams": streams, "gaps": gaps},
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
