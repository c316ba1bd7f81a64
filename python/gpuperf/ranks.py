"""A cross-rank report over many rank recordings, one task per recording,
in this process or fanned out over a Dask cluster.

    import gpuperf.ranks
    from dask.distributed import Client

    with Client("tcp://scheduler:8786") as client:
        result = gpuperf.ranks.report(paths, client=client)
    print(gpuperf.ranks.table(result))

or from a shell: `python -m gpuperf.ranks PATHS... [--scheduler ADDR | --workers N]`.

Each task runs `gpuperf report` on one recording (or Kineto trace) where the
task runs, and returns a few numbers (`summarize`); only those travel back.
The result is the same with or without Dask: the tasks are independent and the
rows are put in rank order.

Per rank:

- `kernel_ns`: GPU kernel time (copies and memsets are not kernels);
- `collective_ns`: the time of NCCL kernels (names containing `nccl`, any
  case), the rank's collective communication and its wait for the other ranks;
- `idle_ns`: the GPU's idle time, summed over streams, as `gpuperf report` finds it;
- `step_ns`: the median `ProfilerStep#N` duration where the trace has those
  annotations (PyTorch's profiler writes them), else the GPU span of the trace.

A rank stands out on a metric (`kernel_ns`, `collective_ns`, `idle_ns`,
`step_ns`) when |x - median| > K * 1.4826 * MAD, MAD being the median absolute
deviation from the median over all ranks (1.4826 * MAD estimates the standard
deviation of normal data, robustly: one slow rank does not hide itself by
widening the band). K is `OUTLIER_K` (3) unless given.
"""

import argparse
import gzip
import json
import os
import re
import statistics
import sys

from . import report as _report

__all__ = ["OUTLIER_K", "METRICS", "summarize", "outliers", "report", "table", "main"]

#: The default K of the outlier rule (see the module's documentation).
OUTLIER_K = 3.0
#: The per-rank metrics the outlier rule looks at.
METRICS = ("kernel_ns", "collective_ns", "idle_ns", "step_ns")
# `gpuperf report` names GPU work other than kernels in brackets: [Memcpy HtoD], [Memset].
_NOT_KERNEL = re.compile(r"^\[")
# The most rows `gpuperf report` gives: every kernel name of any real trace.
_ALL_ROWS = 100000


def _kineto(path):
    """The JSON of a PyTorch profiler (Kineto) trace, or None for anything else."""
    name = os.fspath(path)
    opener = gzip.open if name.endswith(".gz") else open
    if not re.search(r"\.json(\.gz)?$", name):
        return None
    try:
        with opener(name, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "traceEvents" in doc else None


def _rank_from_name(path):
    base = os.path.basename(os.path.normpath(os.fspath(path)))
    m = re.search(r"rank[-_.]?(\d+)", base, re.IGNORECASE) or re.search(r"(\d+)(?!.*\d)", base)
    return int(m.group(1)) if m else None


def summarize(path, rank=None):
    """The per-rank numbers of one recording or trace: a dict of `rank`,
    `path`, `kernel_ns`, `kernels` (launches), `collective_ns`, `idle_ns`,
    `step_ns`, `steps` and `step_from` (`ProfilerStep` or `span`).

    The rank is `rank` when given, else the one its processes recorded (the
    launcher's `RANK`, `SLURM_PROCID`…, or a PyTorch trace's
    `distributedInfo.rank`) when they agree on one, else the number after
    `rank` in the file name, else its last number.
    """
    rep = _report(path, top=_ALL_ROWS)
    kernels = [k for k in rep["kernels"] if not _NOT_KERNEL.match(k["name"])]
    doc = _kineto(path)
    if rank is None:
        recorded = {p["rank"] for p in rep.get("processes", []) if p.get("rank") is not None}
        if len(recorded) == 1:
            rank = recorded.pop()
    if rank is None and doc is not None:
        rank = (doc.get("distributedInfo") or {}).get("rank")
    if rank is None:
        rank = _rank_from_name(path)
    steps = []
    if doc is not None:
        steps = [
            round(e["dur"] * 1000)
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
        ]
    streams = rep["idle_streams"]
    return {
        "rank": rank,
        "path": os.fspath(path),
        "kernel_ns": sum(k["total_ns"] for k in kernels),
        "kernels": sum(k["count"] for k in kernels),
        "collective_ns": sum(k["total_ns"] for k in kernels if "nccl" in k["name"].lower()),
        "idle_ns": sum(s["idle_ns"] for s in streams),
        "step_ns": (
            int(statistics.median(steps)) if steps else max((s["span_ns"] for s in streams), default=0)
        ),
        "steps": len(steps),
        "step_from": "ProfilerStep" if steps else "span",
    }


def outliers(rows, k=OUTLIER_K):
    """The (rank, metric, value, median, mad) of each rank whose metric is
    beyond median +- k * 1.4826 * MAD over `rows` (dicts as `summarize` gives)."""
    found = []
    for metric in METRICS:
        values = [r[metric] for r in rows]
        if len(values) < 3:
            continue  # two ranks have no majority to stand out from
        med = statistics.median(values)
        mad = statistics.median(abs(v - med) for v in values)
        for r in rows:
            if abs(r[metric] - med) > k * 1.4826 * mad:
                found.append(
                    {
                        "rank": r["rank"],
                        "metric": metric,
                        "value": r[metric],
                        "median": med,
                        "mad": mad,
                    }
                )
    return found


def report(paths, client=None, ranks=None, k=OUTLIER_K, workers=None):
    """The cross-rank report of `paths`: `{"ranks": [summarize(...) per path,
    in rank order], "outliers": outliers(...), "k": k}`.

    With `client` (a `dask.distributed.Client`), one task per path runs on the
    cluster's workers, which must have this module and the `gpuperf` command
    and see the paths; without, the tasks run here, one after another. A
    list given as `workers` gets the addresses of the workers that ran tasks.
    """
    paths = [os.fspath(p) for p in paths]
    ranks = list(ranks) if ranks is not None else [None] * len(paths)
    if len(ranks) != len(paths):
        raise ValueError(f"{len(ranks)} ranks for {len(paths)} paths")
    if client is None:
        rows = [summarize(p, r) for p, r in zip(paths, ranks)]
    else:
        # pure=False: a recording may be rewritten between two reports.
        futures = client.map(summarize, paths, ranks, pure=False)
        rows = client.gather(futures)
        if workers is not None:
            held = client.who_has(futures)
            workers.extend(sorted({w for f in futures for w in held.get(f.key, ())}))
    # Rank order; rows of no known rank last, by path.
    rows.sort(key=lambda r: (r["rank"] is None, r["rank"] or 0, r["path"]))
    return {"ranks": rows, "outliers": outliers(rows, k), "k": k}


def _ms(ns):
    return f"{ns / 1e6:.3f}"


def table(result):
    """The report as text: one line per rank, then the ranks that stand out."""
    lines = [
        f"{'rank':>5} {'kernels ms':>12} {'collective ms':>14} {'idle ms':>10}"
        f" {'step ms':>10} {'step from':>12}  path"
    ]
    for r in result["ranks"]:
        rank = "?" if r["rank"] is None else r["rank"]
        lines.append(
            f"{rank:>5} {_ms(r['kernel_ns']):>12} {_ms(r['collective_ns']):>14}"
            f" {_ms(r['idle_ns']):>10}"
            f" {_ms(r['step_ns']):>10} {r['step_from']:>12}  {r['path']}"
        )
    if result["outliers"]:
        lines.append(f"\nRanks that stand out (beyond median +- {result['k']:g} x 1.4826 x MAD):")
        for o in result["outliers"]:
            lines.append(
                f"  rank {o['rank']}: {o['metric']} {_ms(o['value'])} ms"
                f" (median {_ms(o['median'])} ms, MAD {_ms(o['mad'])} ms)"
            )
    else:
        lines.append("\nNo rank stands out.")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m gpuperf.ranks",
        description="A cross-rank report over per-rank gpuperf recordings or PyTorch traces, "
        "one task per recording, optionally on a Dask cluster.",
    )
    p.add_argument("paths", nargs="+", help="one recording or trace per rank")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler", metavar="ADDR", help="a running Dask scheduler, e.g. tcp://host:8786"
    )
    where.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="start a Dask cluster of N worker processes on this machine (loopback only)",
    )
    p.add_argument(
        "-k",
        type=float,
        default=OUTLIER_K,
        help=f"outlier band, in robust standard deviations (default {OUTLIER_K:g})",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)

    if args.scheduler or args.workers:
        from dask.distributed import Client, LocalCluster

        if args.workers:
            cluster = LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",  # loopback only
                dashboard_address=None,
            )
        else:
            cluster = None
        try:
            with Client(cluster if cluster is not None else args.scheduler) as client:
                ran_on = []
                result = report(args.paths, client=client, k=args.k, workers=ran_on)
                print(
                    f"gpuperf.ranks: {len(args.paths)} tasks ran on {len(ran_on)} Dask workers:",
                    *ran_on,
                    file=sys.stderr,
                )
        finally:
            if cluster is not None:
                cluster.close()
    else:
        result = report(args.paths, k=args.k)
    print(json.dumps(result, indent=1) if args.json else table(result))
    return 0


if __name__ == "__main__":
    # As `python -m gpuperf.ranks` this file is `__main__`, which the workers
    # cannot import: run the functions of the module `gpuperf.ranks`, which
    # they can, so that Dask sends the task by name.
    from gpuperf.ranks import main as _main

    sys.exit(_main())
