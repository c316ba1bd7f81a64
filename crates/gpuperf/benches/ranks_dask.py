#!/usr/bin/env python3
"""The cross-rank report over 8 rank traces: in one process against fanned out
over a local Dask cluster, alternating, median of the runs.

    GPUPERF_COMMAND=target/release/gpuperf PYTHONPATH=python \\
        PYTHON crates/gpuperf/benches/ranks_dask.py [--runs 5] [--workers 2]

PYTHON needs dask[distributed] (`crates/test-support/dask/install.sh` makes a
venv with it). The 8 traces are the two real rank traces of
samples/recordings/ranks, each written four times with its `distributedInfo`
saying ranks 0..7 of 8: real work per task, as many tasks as an 8-rank job.
Times are wall seconds of `gpuperf.ranks.report`; the cluster's start is timed
apart, once.
"""

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time

import gpuperf.ranks


def eight_ranks(out):
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, "../../../samples/recordings/ranks")
    docs = []
    for r in (0, 1):
        with gzip.open(os.path.join(src, f"sampled_rank-{r}.json.gz"), "rt") as f:
            docs.append(json.load(f))
    paths = []
    for rank in range(8):
        doc = docs[rank % 2]
        doc["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=rank, world_size=8)
        p = os.path.join(out, f"trace-{rank}.json.gz")
        with gzip.open(p, "wt") as f:
            json.dump(doc, f)
        paths.append(p)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    from dask.distributed import Client, LocalCluster

    with tempfile.TemporaryDirectory() as tmp:
        paths = eight_ranks(tmp)
        t0 = time.perf_counter()
        cluster = LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )
        client = Client(cluster)
        start = time.perf_counter() - t0
        alone, fanned = [], []
        try:
            expected = None
            for _ in range(args.runs):
                t = time.perf_counter()
                a = gpuperf.ranks.report(paths)
                alone.append(time.perf_counter() - t)
                t = time.perf_counter()
                f = gpuperf.ranks.report(paths, client=client)
                fanned.append(time.perf_counter() - t)
                if a != f or (expected is not None and a != expected):
                    sys.exit("the fanned-out report differs from the one-process one")
                expected = a
        finally:
            client.close()
            cluster.close()
    load = open("/proc/loadavg").read().split()[:3]
    ma, mf = statistics.median(alone), statistics.median(fanned)
    print(f"8 rank traces, {args.runs} alternating runs, {os.cpu_count()} CPUs, load {' '.join(load)}")
    print(f"one process:            median {ma:.2f} s  (runs {', '.join(f'{x:.2f}' for x in alone)})")
    print(
        f"Dask, {args.workers} workers:        median {mf:.2f} s  (runs {', '.join(f'{x:.2f}' for x in fanned)})"
    )
    print(f"Dask / one process:     {mf / ma:.2f}")
    print(f"cluster start (once):   {start:.2f} s")


if __name__ == "__main__":
    main()
