"""Per-stream idle time of a Kineto trace by Holistic Trace Analysis (HTA).

Usage: python3 hta_idle.py TRACE [--round]

Prints one JSON object: {"rank": R, "streams": {"<stream>": {"host_wait": ns,
"kernel_wait": ns, "other": ns}}}. HTA's times are µs; they are printed in ns.
Without --round, HTA's rounding of fractional-µs timestamps (start up, end down
to the µs) is disabled, so both tools see the trace's own times; every launch of
the trace counts (include_last_profiler_step=True), as in gpuperf.
"""

import json
import os
import shutil
import sys
import tempfile


def main() -> None:
    trace = os.path.abspath(sys.argv[1])
    if "--round" not in sys.argv[2:]:
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    # HTA reads a directory of traces, one per rank.
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(trace, os.path.join(d, os.path.basename(trace)))
        from hta.trace_analysis import TraceAnalysis

        analysis = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
        rank = analysis.t.get_ranks()[0]
        df, _ = analysis.get_idle_time_breakdown(
            ranks=[rank], visualize=False, show_idle_interval_stats=False
        )
    streams: dict = {}
    for row in df.itertuples():
        per = streams.setdefault(str(int(row.stream)), {})
        per[str(row.idle_category)] = round(float(row.idle_time) * 1000)
    print(json.dumps({"rank": int(rank), "streams": streams}, sort_keys=True))


if __name__ == "__main__":
    main()
